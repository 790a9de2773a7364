"""Retry and dead letters end to end: a failing listener sends messages back to the broker
(CONSUMER_SEND_MSG_BACK); they come back from %RETRY%{group} with growing reconsume times and,
after maxReconsumeTimes, land in %DLQ%{group}. Short delay levels keep it quick."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from tests.cluster import Cluster, start_cluster

# Every level is 1 s, so retries (level 3 + reconsume times) come back after about a second.
BROKER_CONF = {"messageDelayLevel": " ".join(["1s"] * 18), "accessMessageInMemoryMaxRatio": "0"}
MAX_RECONSUME = 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, broker_conf=BROKER_CONF) as running:
        yield running


def test_failing_messages_retry_then_go_to_the_dlq(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, "RetryTopic", "RetryGroup"
    deliveries: list[tuple[bytes, str, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        with lock:
            deliveries.extend((m.body, m.topic, m.reconsume_times) for m in msgs)
        if any(m.body == b"poison" for m in msgs):
            raise RuntimeError("the listener fails on this one")  # an exception counts as RECONSUME_LATER
        if any(m.body == b"flaky" and m.reconsume_times == 0 for m in msgs):
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    config = ConsumerConfig(consumer_group=group, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            max_reconsume_times=MAX_RECONSUME)
    consumer = SyncPushConsumer(group, config=config,
                                client_config=ClientConfig(namesrv_addr=ns, instance_name="retry", rebalance_interval=1000))
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_concurrently(listener)
    with SyncProducer("RetryProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1)
        for body in (b"ok", b"flaky", b"poison"):
            msg = Message(topic, body)
            msg.keys = [body.decode()]
            producer.send(msg)
        consumer.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with lock:
                    if sum(1 for b, _, _ in deliveries if b == b"poison") > MAX_RECONSUME:
                        break
                time.sleep(0.1)
            time.sleep(1.5)  # nothing more may arrive for the poison message
        finally:
            consumer.shutdown()

    by_body: dict[bytes, list[tuple[str, int]]] = {}
    for body, t, times in deliveries:
        by_body.setdefault(body, []).append((t, times))
    print({k.decode(): v for k, v in by_body.items()})
    assert by_body[b"ok"] == [(topic, 0)]
    # Consumers see the original topic again; reconsume times count the attempts.
    assert by_body[b"flaky"] == [(topic, 0), (topic, 1)]
    assert by_body[b"poison"] == [(topic, n) for n in range(MAX_RECONSUME + 1)]

    # The poison message is now in the group's dead-letter queue, intact.
    dlq = f"%DLQ%{group}"
    with SyncPullConsumer("DlqReader", namesrv_addr=ns) as reader:
        queues = reader.fetch_subscribe_message_queues(dlq)
        dead = [m for mq in queues for m in reader.pull(mq, "*", 0, 32).msgs]
    assert [m.body for m in dead] == [b"poison"]
    # RETRY_TOPIC keeps the original topic, as RocketMQ does.
    assert dead[0].keys == ["poison"] and dead[0].properties.get("RETRY_TOPIC") == topic
