"""Delayed messages end to end: real NameServer and broker processes, lakemq's client.

The broker runs with short levels (1s 2s 3s), so due times are seconds away, and saves the
schedule's per-level offsets every second (flushDelayOffsetInterval), which bounds what a
kill -9 can deliver twice."""

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
    MessageQueue,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message_batch import encode_messages
from lakemq.errors import MessageIllegalError
from lakemq.remoting import RemotingCommand, SyncRemotingClient
from lakemq.remoting.headers import SendMessageRequestHeader, encode_send_header_v2
from tests.cluster import Cluster, start_cluster

LEVELS = {1: 1.0, 2: 2.0, 3: 3.0}
PERSIST_INTERVAL = 1.0
BROKER_CONF = {"messageDelayLevel": "1s 2s 3s", "accessMessageInMemoryMaxRatio": "0",
               "flushDelayOffsetInterval": str(int(PERSIST_INTERVAL * 1000))}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, broker_conf=BROKER_CONF) as running:
        yield running


class Receiver:
    """A push consumer recording when each body arrives."""

    def __init__(self, ns: str, topic: str, group: str) -> None:
        self.arrivals: dict[bytes, list[float]] = {}
        self.lock = threading.Lock()
        config = ConsumerConfig(consumer_group=group, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        client = ClientConfig(namesrv_addr=ns, instance_name=group, rebalance_interval=1000)
        self.consumer = SyncPushConsumer(group, config=config, client_config=client)
        self.consumer.subscribe(topic, "*")
        self.consumer.register_message_listener_concurrently(self._listener)

    def _listener(self, msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        now = time.time()
        with self.lock:
            for m in msgs:
                self.arrivals.setdefault(m.body, []).append(now)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.arrivals) >= count:
                    return
            time.sleep(0.05)
        raise AssertionError(f"received {len(self.arrivals)} of {count} within {timeout}s: {sorted(self.arrivals)}")


def _read_all(reader: SyncPullConsumer, mq: MessageQueue) -> list[MessageExt]:
    msgs: list[MessageExt] = []
    offset = 0
    while True:
        result = reader.pull(mq, "*", offset, 32)
        if not result.msgs:
            return msgs
        msgs += result.msgs
        offset = result.next_begin_offset


def _send_delayed(producer: SyncProducer, topic: str, body: bytes, level: int) -> float:
    msg = Message(topic, body)
    msg.delay_time_level = level
    producer.send(msg)
    return time.time()


def test_delivered_within_a_second_of_due_time_and_clamped(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, "DelayedTopic"
    receiver = Receiver(ns, topic, "DelayGroup")
    with SyncProducer("DelayProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        receiver.consumer.start()
        try:
            producer.send(Message(topic, b"now"))
            sent = {b"level-1": (_send_delayed(producer, topic, b"level-1", 1), LEVELS[1]),
                    b"level-3": (_send_delayed(producer, topic, b"level-3", 3), LEVELS[3]),
                    # Above the highest level: clamped to it, as RocketMQ does.
                    b"level-99": (_send_delayed(producer, topic, b"level-99", 99), LEVELS[3])}
            receiver.wait_for(4, timeout=15)
        finally:
            receiver.consumer.shutdown()
    for body, (at, delay) in sent.items():
        (arrived,) = receiver.arrivals[body]
        late = arrived - (at + delay)
        print(f"{body.decode()}: due after {delay:.0f}s, arrived {arrived - at:.2f}s after sending")
        assert -0.05 <= late <= 1.0, f"{body!r} arrived {late:+.2f}s from its due time"
    assert receiver.arrivals[b"now"][0] < min(a[0] for b, a in receiver.arrivals.items() if b != b"now")


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_pending_delays_survive_a_broker_restart(cluster: Cluster, how: str) -> None:
    ns, topic = cluster.namesrv_addr, f"DelayedRestart{how}"
    with SyncProducer("DelayRestartProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        for i in range(10):
            _send_delayed(producer, topic, f"r{i}".encode(), 3)
    # Stopped before any is due. SIGTERM persists the schedule offsets; after kill -9 the
    # store recovers and the schedule service resumes from its last persisted offsets.
    if how == "sigterm":
        cluster.restart_broker()
    else:
        cluster.kill_broker()
        cluster.start_broker()
    receiver = Receiver(ns, topic, "DelayRestartGroup")
    receiver.consumer.start()
    try:
        receiver.wait_for(10, timeout=20)
        time.sleep(1.5)  # a second delivery of any of them would show up now
    finally:
        receiver.consumer.shutdown()
    assert sorted(receiver.arrivals) == sorted(f"r{i}".encode() for i in range(10))
    # Nothing was due before the stop, so nothing was delivered twice (at-least-once allows it
    # only for messages re-put between the last offset persist and a kill).
    assert all(len(times) == 1 for times in receiver.arrivals.values()), receiver.arrivals


def test_kill9_while_delivering_loses_nothing_and_repeats_only_the_last_persist_interval(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, "DelayedKillMidway"
    per_level = 20
    with SyncProducer("DelayKillProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        started = time.time()
        for level in LEVELS:
            for i in range(per_level):
                _send_delayed(producer, topic, f"L{level}-{i}".encode(), level)
    # Level 1 was delivered (and its offset saved) more than a persist interval before the
    # kill; level 2 fell due just before it; level 3 is still pending.
    time.sleep(max(0.0, started + 2.7 - time.time()))
    cluster.kill_broker()
    cluster.start_broker()
    time.sleep(max(0.0, started + LEVELS[3] + 2.0 - time.time()))
    with SyncPullConsumer("DelayKillReader", namesrv_addr=ns) as reader:
        stored = [m.body.decode() for mq in reader.fetch_subscribe_message_queues(topic) for m in _read_all(reader, mq)]
    copies = {level: [stored.count(f"L{level}-{i}") for i in range(per_level)] for level in LEVELS}
    print({f"level {level}": f"{sum(c) - per_level} delivered twice" for level, c in copies.items()})
    assert all(c >= 1 for cs in copies.values() for c in cs)  # nothing lost
    assert copies[1] == [1] * per_level and copies[3] == [1] * per_level
    assert all(c <= 2 for c in copies[2])  # at least once: re-put again at most once


def test_batches_refuse_a_delay(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, "DelayedBatch"
    with SyncProducer("DelayBatchProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1)
        later = Message(topic, b"later")
        later.delay_time_level = 1
        with pytest.raises(MessageIllegalError, match="cannot be delayed"):
            producer.send_batch([Message(topic, b"now"), later])
        queue = producer.fetch_publish_message_queues(topic)[0]
    # The broker refuses it too, for clients that do not check (a raw SEND_BATCH_MESSAGE).
    header = SendMessageRequestHeader("raw", topic, "TBW102", 4, queue.queue_id, 0, int(time.time() * 1000), 0,
                                      batch=True)
    request = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, encode_send_header_v2(header),
                                      encode_messages([Message(topic, b"now"), later]))
    with SyncRemotingClient() as client:
        response = client.invoke(cluster.broker_addr(), request, timeout=5)
    assert response.code == ResponseCode.MESSAGE_ILLEGAL, (response.code, response.remark)
    assert "delayed" in (response.remark or "")
