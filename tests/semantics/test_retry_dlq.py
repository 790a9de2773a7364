"""Retry and dead letters end to end: a failing listener sends messages back to the broker
(CONSUMER_SEND_MSG_BACK); they come back from %RETRY%{group} with growing reconsume times and,
after maxReconsumeTimes, land in %DLQ%{group}. Orderly consumers retry in place instead.
Short delay levels keep it quick."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumerConfig,
    Message,
    MessageExt,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from lakemq.errors import LakeMQError
from tests.cluster import Cluster, start_cluster

# A retry waits level 3 + reconsume times: 1 s the first time, 2 s the second.
BROKER_CONF = {"messageDelayLevel": "1s 1s 1s 2s 3s", "accessMessageInMemoryMaxRatio": "0"}
MAX_RECONSUME = 2


def _dead_letters(reader: SyncPullConsumer, dlq: str) -> list[MessageExt]:
    """What the dead-letter topic holds so far (nothing while it does not exist)."""
    try:
        queues = reader.fetch_subscribe_message_queues(dlq)
    except (LakeMQError, LookupError):
        return []
    return [m for mq in queues for m in reader.pull(mq, "*", 0, 32).msgs]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, broker_conf=BROKER_CONF) as running:
        yield running


def test_failing_messages_retry_then_go_to_the_dlq(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, "RetryTopic", "RetryGroup"
    deliveries: list[tuple[bytes, str, int]] = []
    arrivals: dict[bytes, list[float]] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        with lock:
            deliveries.extend((m.body, m.topic, m.reconsume_times) for m in msgs)
            for m in msgs:
                arrivals.setdefault(m.body, []).append(time.monotonic())
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
            # Once dead-lettered the poison message is never delivered again: wait for that.
            with SyncPullConsumer("DlqWatcher", namesrv_addr=ns) as watcher:
                while time.monotonic() < deadline and not _dead_letters(watcher, f"%DLQ%{group}"):
                    time.sleep(0.1)
            # Subscribed to its retry topic by itself: it owns queues of both.
            subscribed = {mq.topic for mq in consumer.owned_queues()}
        finally:
            consumer.shutdown()

    assert subscribed == {topic, f"%RETRY%{group}"}
    by_body: dict[bytes, list[tuple[str, int]]] = {}
    for body, t, times in deliveries:
        by_body.setdefault(body, []).append((t, times))
    assert by_body[b"ok"] == [(topic, 0)]
    # Consumers see the original topic again; reconsume times count the attempts.
    assert by_body[b"flaky"] == [(topic, 0), (topic, 1)]
    assert by_body[b"poison"] == [(topic, n) for n in range(MAX_RECONSUME + 1)]
    first, second, third = arrivals[b"poison"]
    # levels 3 and 4
    assert 0.9 <= second - first <= 2.0 and 1.9 <= third - second <= 3.0, (second - first, third - second)

    # The poison message is now in the group's dead-letter queue, intact.
    dlq = f"%DLQ%{group}"
    with SyncPullConsumer("DlqReader", namesrv_addr=ns) as reader:
        dead = _dead_letters(reader, dlq)
    assert [m.body for m in dead] == [b"poison"]
    # RETRY_TOPIC keeps the original topic, as RocketMQ does.
    assert dead[0].keys == ["poison"] and dead[0].properties.get("RETRY_TOPIC") == topic


def test_orderly_retries_in_place_then_dead_letters(cluster: Cluster) -> None:
    """SUSPEND_CURRENT_QUEUE_A_MOMENT keeps the message at the head of its queue (no
    send-back): later messages wait, order holds. After maxReconsumeTimes the message goes to
    the DLQ and the queue moves on."""
    ns, topic, group = cluster.namesrv_addr, "OrderlyRetryTopic", "OrderlyRetryGroup"
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeOrderlyStatus:
        with lock:
            seen.extend((m.body.decode(), m.reconsume_times) for m in msgs)
        if any(m.body == b"o1" and m.reconsume_times < 2 for m in msgs) or any(m.body == b"o3" for m in msgs):
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    config = ConsumerConfig(consumer_group=group, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            max_reconsume_times=MAX_RECONSUME, suspend_current_queue_time_millis=200)
    consumer = SyncPushConsumer(group, config=config, client_config=ClientConfig(
        namesrv_addr=ns, instance_name="orderly-retry", rebalance_interval=1000))
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_orderly(listener)
    bodies = [f"o{i}" for i in range(5)]
    with SyncProducer("OrderlyRetryProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1, order=True)
        for body in bodies:
            producer.send(Message(topic, body.encode()))
        consumer.start()
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(b == "o4" for b, _ in seen):
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            consumer.shutdown()
        # o1 twice suspended then consumed; o3 suspended until its max, then dead-lettered.
        assert seen == [("o0", 0), ("o1", 0), ("o1", 1), ("o1", 2), ("o2", 0),
                        *[("o3", n) for n in range(MAX_RECONSUME + 1)], ("o4", 0)]
        with SyncPullConsumer("OrderlyDlqReader", namesrv_addr=ns) as reader:
            (dlq,) = reader.fetch_subscribe_message_queues(f"%DLQ%{group}")
            assert [m.body for m in reader.pull(dlq, "*", 0, 32).msgs] == [b"o3"]
            # Nothing went through the retry topic: retries happened in place.
            retry = reader.fetch_subscribe_message_queues(f"%RETRY%{group}")
            assert all(not reader.pull(mq, "*", 0, 32).msgs for mq in retry)
