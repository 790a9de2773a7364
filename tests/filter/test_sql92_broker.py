"""SQL92 subscriptions end to end: lakemq clients against a real broker process."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path

import pytest

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from lakemq.client.admin import Admin
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import FilterExpressionError
from lakemq.filter import compile_sql92
from lakemq.remoting import RemotingCommand
from lakemq.remoting.bodies import ConsumerData, HeartbeatData
from lakemq.remoting.client import RemotingClientConfig
from lakemq.remoting.headers import PullMessageRequestHeader, encode_header
from lakemq.remoting.sync import SyncRemotingClient
from tests.cluster import Cluster, start_cluster

FIRST = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
EXPRESSION = "region IN ('eu', 'us') AND price > 100 AND vip IS NOT NULL"
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000) % 10_000_000}_{next(_names)}"


def client_config(ns: str, instance: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=ns, instance_name=instance, rebalance_interval=1000,
                        persist_consumer_offset_interval=1000)


def _messages(topic: str) -> list[Message]:
    messages = []
    for i in range(60):
        props = {"region": ("eu", "us", "apac")[i % 3], "price": str(i * 7), "seq": str(i)}
        if i % 2 == 0:
            props["vip"] = "yes"
        messages.append(Message(topic, f"m{i}".encode(), properties=props))
    return messages


async def _produce(ns: str, topic: str) -> set[str]:
    """Sends the messages; returns the seq numbers the expression should select."""
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=2)
    messages = _messages(topic)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for msg in messages:
            await producer.send(msg)
    expression = compile_sql92(EXPRESSION)
    return {m.properties["seq"] for m in messages if expression.matches(m.properties)}


async def test_push_consumer_receives_exactly_the_matching_messages(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Sql")
    expected = await _produce(ns, topic)
    assert 0 < len(expected) < 60
    received: list[MessageExt] = []
    consumer = PushConsumer(unique("cg"), config=FIRST, client_config=client_config(ns, "sql-push"))
    consumer.subscribe(topic, MessageSelector.by_sql(EXPRESSION))

    async def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        received.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    async with consumer:
        deadline = time.monotonic() + 20
        while len(received) < len(expected) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # anything wrongly delivered would arrive by now
    assert sorted(m.properties["seq"] for m in received) == sorted(expected)


async def test_pull_consumer_with_a_selector(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("SqlPull")
    expected = await _produce(ns, topic)
    got: list[str] = []
    async with PullConsumer(unique("pc"), client_config=client_config(ns, "sql-pull")) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, MessageSelector.by_sql(EXPRESSION), offset, 8)
                if result.pull_status is PullStatus.FOUND:
                    got += [m.properties["seq"] for m in result.msgs]
                elif result.pull_status is not PullStatus.NO_MATCHED_MSG:
                    break
                offset = result.next_begin_offset
        with pytest.raises(FilterExpressionError, match="does not parse"):
            await consumer.pull(mq, MessageSelector.by_sql("price >"), 0, 8)
    assert sorted(got) == sorted(expected)


def test_client_refuses_a_bad_expression_before_sending() -> None:
    consumer = PushConsumer(unique("cg"), client_config=ClientConfig(namesrv_addr="127.0.0.1:1"))
    with pytest.raises(FilterExpressionError, match="LIKE is not supported"):
        consumer.subscribe("AnyTopic", MessageSelector.by_sql("name LIKE 'a%'"))
    assert consumer.subscriptions == {}


def _heartbeat(group: str, topic: str, expression: str) -> RemotingCommand:
    sub = SubscriptionData(topic, expression, expression_type="SQL92", sub_version=int(time.time() * 1000))
    consumer = ConsumerData(group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET", (sub,),
                            False)
    body = HeartbeatData("127.0.0.1@raw", (), (consumer,)).encode()
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body)


def test_broker_refuses_bad_expressions_at_subscribe_time(cluster: Cluster) -> None:
    addr = cluster.broker_addr("broker-a")
    with SyncRemotingClient(RemotingClientConfig()) as client:
        bad = client.invoke(addr, _heartbeat(unique("raw"), "TopicX", "a = 1 OR"), 5)
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "does not parse" in (bad.remark or "")
        ok = client.invoke(addr, _heartbeat(unique("raw"), "TopicX", "a = 1 OR b > 2"), 5)
        assert ok.code == ResponseCode.SUCCESS
        header = PullMessageRequestHeader(
            consumer_group=unique("raw"), topic="TBW102", queue_id=0, queue_offset=0, max_msg_nums=1,
            sys_flag=0x4, commit_offset=0, suspend_timeout_millis=0, sub_version=0,
            subscription="TAGS == 'x'", expression_type="SQL92")
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
        pull = client.invoke(addr, request, 5)
        assert pull.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "'==' is not SQL92" in (pull.remark or "")


def test_property_filter_can_be_turned_off(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=["broker-a"], broker_conf={"enablePropertyFilter": "false"}) as off:
        header = PullMessageRequestHeader(
            consumer_group=unique("raw"), topic="TBW102", queue_id=0, queue_offset=0, max_msg_nums=1,
            sys_flag=0x4, commit_offset=0, suspend_timeout_millis=0, sub_version=0,
            subscription="a > 1", expression_type="SQL92")
        with SyncRemotingClient(RemotingClientConfig()) as client:
            pull = client.invoke(off.broker_addr("broker-a"),
                                 RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header)), 5)
            check = client.invoke(off.broker_addr("broker-a"), _check_client_config("a > 1", "SQL92"), 5)
        assert check.code == ResponseCode.SYSTEM_ERROR
        assert pull.code == ResponseCode.SYSTEM_ERROR
        assert "does not support consumer to filter message by SQL92" in (pull.remark or "")


def _check_client_config(expression: str, expression_type: str) -> RemotingCommand:
    sub = SubscriptionData("TopicX", expression, expression_type=expression_type)
    body = json.dumps({"clientId": "127.0.0.1@java", "group": "g", "subscriptionData": sub.to_json()})
    return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body.encode())


def test_check_client_config_answers_java_consumers(cluster: Cluster) -> None:
    """Java consumers send CHECK_CLIENT_CONFIG to every broker before a SQL92 subscription."""
    addr = cluster.broker_addr("broker-a")
    with SyncRemotingClient(RemotingClientConfig()) as client:
        assert client.invoke(addr, _check_client_config("a > 1", "SQL92"), 5).code == ResponseCode.SUCCESS
        tags = client.invoke(addr, _check_client_config("tagA || tagB", "TAG"), 5)
        assert tags.code == ResponseCode.SUCCESS
        bad = client.invoke(addr, _check_client_config("a >> 1", "SQL92"), 5)
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "SQL92 expression 'a >> 1'" in (bad.remark or "")
