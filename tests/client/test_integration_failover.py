"""Producer routing against two real brokers: retries avoid a dead broker, latency fault
tolerance isolates it, and topics are auto-created through the TBW102 route."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_helpers import unique

from lakemq.client import Message, Producer, ProducerConfig, SendStatus, SyncProducer
from lakemq.client.admin import Admin
from tests.cluster import Cluster, start_cluster


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, brokers=("broker-a", "broker-b")) as cluster:
        yield cluster


async def test_sends_avoid_a_dead_broker(two_brokers: Cluster) -> None:
    ns, topic = two_brokers.namesrv_addr, unique("Failover")
    async with Admin(ns) as admin:
        assert await admin.create_topic(topic, queue_nums=2) == ["broker-a", "broker-b"]
    config = ProducerConfig(send_latency_fault_enable=True)
    async with Producer(unique("pg"), namesrv_addr=ns, config=config) as producer:
        before = [await producer.send(Message(topic, f"x{i}".encode())) for i in range(8)]
        assert {r.message_queue.broker_name for r in before} == {"broker-a", "broker-b"}  # round robin

        two_brokers.kill_broker("broker-b")
        started = time.monotonic()
        after = [await producer.send(Message(topic, f"y{i}".encode())) for i in range(20)]
        elapsed = time.monotonic() - started
        assert all(r.send_status is SendStatus.SEND_OK for r in after)
        assert {r.message_queue.broker_name for r in after} == {"broker-a"}
        assert not producer.sender.fault.is_available("broker-b")  # isolated after its failure
        assert producer.sender.fault.is_available("broker-a")
        assert elapsed < 10


async def test_topic_auto_created_through_tbw102(two_brokers: Cluster) -> None:
    ns, topic = two_brokers.namesrv_addr, unique("Auto")
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        result = await producer.send(Message(topic, b"first"))
        assert result.send_status is SendStatus.SEND_OK
        queues = await producer.fetch_publish_message_queues(topic)
        assert queues and all(q.queue_id < 4 for q in queues)  # defaultTopicQueueNums
    async with Admin(ns) as admin:
        assert topic in await admin.list_topics()


def test_sync_producer_sends_directly_and_retries_past_a_dead_broker(two_brokers: Cluster) -> None:
    """A SyncProducer writes each send's first attempt on the calling thread's own connection;
    when that attempt fails (its broker is gone), the retries go through the loop to the other."""
    ns, topic = two_brokers.namesrv_addr, unique("SyncFailover")

    async def create() -> list[str]:
        async with Admin(ns) as admin:
            return await admin.create_topic(topic, queue_nums=2)

    assert asyncio.run(create()) == ["broker-a", "broker-b"]
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.send(Message(topic, b"route"))  # the route is looked up (through the loop) once
        before = [producer.send(Message(topic, f"x{i}".encode())) for i in range(8)]
        assert {r.message_queue.broker_name for r in before} == {"broker-a", "broker-b"}
        assert len(producer._connections) == 2  # one per broker, this thread's own
        two_brokers.kill_broker("broker-b")
        after = [producer.send(Message(topic, f"y{i}".encode())) for i in range(8)]
        assert all(r.send_status is SendStatus.SEND_OK for r in after)
        assert {r.message_queue.broker_name for r in after} == {"broker-a"}
