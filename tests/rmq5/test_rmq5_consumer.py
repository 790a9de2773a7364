"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2) consumes from a real
lakemq broker through its gRPC front door: SimpleConsumer (receive, ack, change invisible
duration, redelivery, DLQ, TAG and SQL92 filters) and PushConsumer (listener, FIFO order per
message group, retry), across protocols (sent by lakemq's 4.x client, and the reverse)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig
from lakemq.client.sync import SyncProducer, SyncPullConsumer
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import Message
from lakemq.errors import LakeMQError
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.sync import SyncRemotingClient
from tests.cluster import Cluster
from tests.compat.java_client import run_driver
from tests.rmq5.rmq5 import Driver, grpc_cluster, start_driver, wait_for_bodies

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("cluster"), grpc_port) as running:
        yield running


def _topic(cluster: Cluster, name: str, queues: int = 4) -> str:
    with SyncProducer("grpc-consume-admin", namesrv_addr=cluster.namesrv_addr) as admin:
        admin.create_topic(name, queues)
    return name


def _group(cluster: Cluster, name: str, **config: Any) -> str:
    """Create the subscription group as mqadmin updateSubGroup does."""
    body = json.dumps(SubscriptionGroupConfig(name, **config).to_json()).encode()
    client = SyncRemotingClient()
    try:
        reply = client.invoke(cluster.broker_addr(),
                              RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body), 10)
    finally:
        client.close()
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return name


def _message(topic: str, body: str, tag: str | None = None, **properties: str) -> Message:
    msg = Message(topic, body.encode(), properties=properties)
    msg.tags = tag
    return msg


def _send_4x(cluster: Cluster, topic: str, messages: list[Message]) -> list[str]:
    with SyncProducer("grpc-consume-4x", namesrv_addr=cluster.namesrv_addr) as producer:
        return [producer.send(m).msg_id for m in messages]


def _wait_for_route(cluster: Cluster, topic: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with SyncPullConsumer("grpc-route-probe", namesrv_addr=cluster.namesrv_addr) as probe:
        while True:
            try:
                if probe.fetch_subscribe_message_queues(topic):
                    return
            except LakeMQError:
                pass  # not registered yet
            assert time.monotonic() < deadline, f"the NameServer has no route of {topic}"
            time.sleep(0.2)


def _simple(python: str, grpc_port: int, topic: str, group: str, log: Path, **extra: Any) -> Driver:
    driver = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "simple", [], log, group=group, **extra)
    driver.read_until("started", 60)
    return driver


def _receive_all(driver: Driver, count: int, invisible_s: int, timeout: float = 60) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        answer = driver.ask(op="receive", max=16, invisible_s=invisible_s)
        assert answer["event"] == "received", answer
        got += answer["messages"]
    return got


def test_simple_consumer_receives_acks_hides_longer_and_gets_redeliveries(python: str, cluster: Cluster,
                                                                          grpc_port: int, tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5Simple")
    ids = _send_4x(cluster, topic, [_message(topic, f"s{i}", "TagS") for i in range(3)])
    driver = _simple(python, grpc_port, topic, "Rmq5SimpleGroup", tmp_path / "driver.log")
    try:
        first = {m["body"]: m for m in _receive_all(driver, 3, invisible_s=3)}
        assert sorted(first) == ["s0", "s1", "s2"]
        assert {first[f"s{i}"]["message_id"] for i in range(3)} == set(ids)  # the 4.x UNIQ_KEY
        assert all(m["attempt"] == 1 and m["tag"] == "TagS" and m["topic"] == topic for m in first.values())
        s0, s1, s2 = (first[f"s{i}"] for i in range(3))
        assert driver.ask(op="ack", id=s0["message_id"])["event"] == "acked"
        changed = driver.ask(op="change", id=s1["message_id"], invisible_s=60)
        assert changed["event"] == "changed" and changed["handle"] != s1["handle"]
        stale = driver.ask(op="ack_with", id=s1["message_id"], handle=s1["handle"])
        assert stale["event"] == "error" and "40013" in stale["error"], stale  # INVALID_RECEIPT_HANDLE
        # s2's 3 s pass unacked: delivered again, its attempt raised; s1 stays hidden (60 s).
        again = _receive_all(driver, 1, invisible_s=30)
        assert [(m["body"], m["attempt"], m["message_id"]) for m in again] == [("s2", 2, s2["message_id"])]
        assert driver.ask(op="ack", id=s2["message_id"])["event"] == "acked"
        assert driver.ask(op="ack_with", id=s1["message_id"], handle=changed["handle"])["event"] == "acked"
        assert driver.ask(op="receive", max=16, invisible_s=30)["messages"] == []
    finally:
        driver.finish()


def test_unacked_messages_reach_the_dlq_after_the_groups_max_attempts(python: str, cluster: Cluster,
                                                                      grpc_port: int, tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5Dlq", 2)
    group = _group(cluster, "Rmq5DlqGroup", retry_max_times=2)
    _send_4x(cluster, topic, [_message(topic, "doomed")])
    driver = _simple(python, grpc_port, topic, group, tmp_path / "driver.log")
    try:
        attempts = [m["attempt"] for _ in range(2) for m in _receive_all(driver, 1, invisible_s=1)]
        assert attempts == [1, 2]
        assert driver.ask(op="receive", max=16, invisible_s=1)["messages"] == []  # spent: not delivered again
    finally:
        driver.finish()
    dead = wait_for_bodies(cluster.namesrv_addr, f"%DLQ%{group}", "Rmq5DlqReader", {b"doomed"}, 40)
    assert [m.body for m in dead] == [b"doomed"]


def test_tag_and_sql92_filters(python: str, cluster: Cluster, grpc_port: int, tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5Filter")
    messages = [_message(topic, f"m{i}", "TagA" if i % 2 else "TagB", n=str(i)) for i in range(6)]
    _send_4x(cluster, topic, messages)
    tagged = _simple(python, grpc_port, topic, "Rmq5TagGroup", tmp_path / "tag.log", expression="TagA")
    sql = _simple(python, grpc_port, topic, "Rmq5SqlGroup", tmp_path / "sql.log", filter="SQL92",
                  expression="n >= 3 AND TAGS = 'TagB'")
    try:
        assert sorted(m["body"] for m in _receive_all(tagged, 3, invisible_s=30)) == ["m1", "m3", "m5"]
        assert sorted(m["body"] for m in _receive_all(sql, 1, invisible_s=30)) == ["m4"]
        assert tagged.ask(op="receive", max=16, invisible_s=30)["messages"] == []
        assert sql.ask(op="receive", max=16, invisible_s=30)["messages"] == []
    finally:
        tagged.finish()
        sql.finish()


def test_push_consumer_consumes_in_order_per_message_group_and_retries(python: str, cluster: Cluster,
                                                                      grpc_port: int, tmp_path: Path) -> None:
    """Sent by the 5.x producer, consumed by its PushConsumer in a FIFO group: each message
    group in send order; a failed consumption is tried again before its group moves on."""
    topic = _topic(cluster, "Rmq5Fifo")
    group = _group(cluster, "Rmq5FifoGroup", consume_message_orderly=True)
    messages = [{"body": f"{g}-{i}", "group": g} for i in range(4) for g in ("ga", "gb")]
    sender = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "send", messages, tmp_path / "send.log")
    try:
        assert sum(1 for x in sender.read_until("done", 90) if x.get("event") == "sent") == len(messages)
    finally:
        sender.finish()
    consumer = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "consume", [], tmp_path / "consume.log",
                            group=group, fail={"ga-1": 1})
    try:
        consumed = consumer.consumed(len(messages) + 1, 90)
    finally:
        consumer.finish()
    for g in ("ga", "gb"):
        bodies = [c["body"] for c in consumed if c["group"] == g and not c["failed"]]
        assert bodies == [f"{g}-{i}" for i in range(4)], consumed
    retried = [(c["failed"], c["attempt"]) for c in consumed if c["body"] == "ga-1"]
    assert retried[0] == (True, 1) and retried[1][0] is False, retried


def test_push_consumer_nack_is_delivered_again_after_the_backoff(python: str, cluster: Cluster, grpc_port: int,
                                                                 tmp_path: Path) -> None:
    """A failed consumption of a concurrent group: the client hides the message for the
    backoff the broker's Settings gave (10 s, the 4.x delay of level 3); it comes back with
    attempt 2. Sent by lakemq's 4.x client."""
    topic = _topic(cluster, "Rmq5Retry")
    _send_4x(cluster, topic, [_message(topic, "flaky"), _message(topic, "fine")])
    consumer = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "consume", [], tmp_path / "consume.log",
                            group="Rmq5RetryGroup", fail={"flaky": 1})
    try:
        consumed = consumer.consumed(3, 60)
    finally:
        consumer.finish()
    flaky = [c for c in consumed if c["body"] == "flaky"]
    assert [(c["failed"], c["attempt"]) for c in flaky] == [(True, 1), (False, 2)], consumed
    assert [c["attempt"] for c in consumed if c["body"] == "fine"] == [1]


def test_fifo_push_consumer_forwards_a_message_out_of_attempts_to_the_dlq(python: str, cluster: Cluster,
                                                                          grpc_port: int, tmp_path: Path) -> None:
    """The 5.x PushConsumer retries a FIFO message in place (17 attempts, 1 s apart, its
    default when the policy is exponential) and then calls ForwardMessageToDeadLetterQueue;
    the messages behind it follow."""
    topic = _topic(cluster, "Rmq5FifoDlq", 1)
    group = _group(cluster, "Rmq5FifoDlqGroup", consume_message_orderly=True)
    _send_4x(cluster, topic, [_message(topic, "poison"), _message(topic, "next")])
    consumer = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "consume", [], tmp_path / "consume.log",
                            group=group, fail={"poison": 1000})
    try:
        consumed = consumer.consumed(18, 90)
    finally:
        consumer.finish()
    assert [c["body"] for c in consumed] == ["poison"] * 17 + ["next"], consumed
    dead = wait_for_bodies(cluster.namesrv_addr, f"%DLQ%{group}", "Rmq5FifoDlqReader", {b"poison"}, 40)
    assert [m.body for m in dead] == [b"poison"]


@pytest.mark.jvm
def test_sent_by_the_49_java_client_received_by_the_5x_simple_consumer(python: str, cluster: Cluster,
                                                                      grpc_port: int, tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5From49")
    _wait_for_route(cluster, topic)  # the 4.9 client gives up on a topic the NameServer does not know yet
    run = run_driver(cluster.namesrv_addr, "J49", ["sendto"], tmp_path / "java", topic=topic, count="4", label="j49")
    sent = {e["msgId"]: e for e in run["sendto"].of("sent")}
    assert len(sent) == 4, run.client_log()
    driver = _simple(python, grpc_port, topic, "Rmq5From49Group", tmp_path / "driver.log")
    try:
        got = _receive_all(driver, 4, invisible_s=30)
        for message in got:
            assert driver.ask(op="ack", id=message["message_id"])["event"] == "acked"
    finally:
        driver.finish()
    assert {m["message_id"] for m in got} == set(sent)
    for message in got:
        java = sent[message["message_id"]]
        assert message["body"].encode() == java.body and message["tag"] == java["tags"]
        for name in ("mode", "seq", "color", "text"):  # user properties, the text one non-ASCII
            assert message["properties"][name] == java.props[name]
