"""Producer send modes and consumers against a real name server and broker process."""

from __future__ import annotations

import asyncio
import collections
import time
from datetime import datetime

from client_helpers import client_config, unique, wait_until

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumerConfig,
    Message,
    MessageExt,
    MessageModel,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    select_by_hash,
)
from lakemq.client.admin import Admin
from tests.cluster import Cluster

FIRST = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)


async def create_topic(ns: str, topic: str, queues: int = 4) -> None:
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=queues)


def collecting_consumer(ns: str, group: str, topic: str, sink: list[MessageExt], *, instance: str,
                        expression: str = "*", config: ConsumerConfig = FIRST) -> PushConsumer:
    consumer = PushConsumer(group, config=config, client_config=client_config(ns, instance))
    consumer.subscribe(topic, expression)

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        sink.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    return consumer


async def test_every_send_mode_consumed_exactly_once(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Modes")
    await create_topic(ns, topic)
    expected: set[bytes] = set()
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(20):
            body = f"sync-{i}".encode()
            result = await producer.send(Message(topic, body))
            assert result.send_status is SendStatus.SEND_OK and result.queue_offset >= 0
            assert len(result.msg_id) == 32 and len(result.offset_msg_id) == 32
            expected.add(body)
        callbacks: list[tuple[object, object]] = []
        tasks = [producer.send_async(Message(topic, f"async-{i}".encode()), lambda r, e: callbacks.append((r, e)))
                 for i in range(20)]
        results = await asyncio.gather(*tasks)
        assert all(r.send_status is SendStatus.SEND_OK for r in results)
        expected |= {f"async-{i}".encode() for i in range(20)}
        for i in range(10):
            await producer.send_oneway(Message(topic, f"oneway-{i}".encode()))
            expected.add(f"oneway-{i}".encode())
        batch = [Message(topic, f"batch-{i}".encode()) for i in range(10)]
        batch_result = await producer.send_batch(batch)
        assert batch_result.msg_id.split(",") == [m.unique_key for m in batch]
        expected |= {m.body for m in batch}
        big = b"0123456789abcdef" * 1024  # 16 KiB: compressed on the wire
        await producer.send(Message(topic, big))
        expected.add(big)
        ordered = await producer.send(Message(topic, b"keyed"), selector=select_by_hash, arg="order-1")
        expected.add(b"keyed")
        queues = await producer.fetch_publish_message_queues(topic)
        assert ordered.message_queue == select_by_hash(queues, Message(topic, b""), "order-1")
    assert len(callbacks) == 20 and all(e is None for _, e in callbacks)

    got: list[MessageExt] = []
    consumer = collecting_consumer(ns, unique("cg"), topic, got, instance="modes")
    await consumer.start()
    try:
        await wait_until(lambda: len({m.body for m in got}) >= len(expected), what="all messages")
        await asyncio.sleep(0.5)  # anything extra would be a duplicate
    finally:
        await consumer.shutdown()
    bodies = [m.body for m in got]
    assert sorted(bodies) == sorted(expected)  # every message, each once
    assert all(m.topic == topic and m.msg_id == m.unique_key for m in got)


async def test_producers_sharing_an_instance_all_leave_before_it_closes(cluster: Cluster, caplog) -> None:
    # Producers of one process share a client instance. Shut down together, the first to
    # finish its unregister call used to close the instance's connections under the others'
    # calls still in flight ("unregister ... failed: connection ... closed").
    ns, topic = cluster.namesrv_addr, unique("Leave")
    await create_topic(ns, topic)
    producers = [Producer(unique("pg"), client_config=client_config(ns, "leaving")) for _ in range(4)]
    for producer in producers:
        await producer.start()
    instance = producers[0]._instance
    assert instance is not None and all(p._instance is instance for p in producers)
    for producer in producers:
        assert (await producer.send(Message(topic, b"x"))).send_status is SendStatus.SEND_OK
    with caplog.at_level("WARNING", logger="lakemq"):
        await asyncio.gather(*(producer.shutdown() for producer in producers))
    assert not [r.getMessage() for r in caplog.records if "unregister" in r.getMessage()]
    assert not instance._started and not instance._tasks  # the last one out closed it


async def test_tag_subscription_filters(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Tags")
    await create_topic(ns, topic, 2)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(12):
            msg = Message(topic, f"{i}".encode())
            msg.tags = ["a", "b", "c"][i % 3]
            await producer.send(msg)
    got: list[MessageExt] = []
    consumer = collecting_consumer(ns, unique("cg"), topic, got, instance="tags", expression="a || c")
    await consumer.start()
    try:
        await wait_until(lambda: len(got) >= 8, what="tagged messages")
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    assert sorted(int(m.body) for m in got) == [i for i in range(12) if i % 3 != 1]
    assert {m.tags for m in got} == {"a", "c"}


async def test_broadcasting_gives_everything_to_everyone(cluster: Cluster, tmp_path) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("Bcast"), unique("bg")
    await create_topic(ns, topic)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"{i}".encode()))
    config = ConsumerConfig(message_model=MessageModel.BROADCASTING,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, offsets_dir=str(tmp_path))
    sinks: dict[str, list[MessageExt]] = {"x": [], "y": []}
    consumers = [collecting_consumer(ns, group, topic, sinks[name], instance=name, config=config) for name in sinks]
    for c in consumers:
        await c.start()
    try:
        await wait_until(lambda: all(len(s) >= 30 for s in sinks.values()), what="both consumers")
        await asyncio.sleep(0.3)
    finally:
        for c in consumers:
            await c.shutdown()
    for sink in sinks.values():
        assert sorted(int(m.body) for m in sink) == list(range(30))
    offset_files = sorted(tmp_path.glob(f"*/{group}/offsets.json"))
    assert len(offset_files) == 2  # one local offset file per broadcasting consumer


async def test_orderly_keeps_per_queue_order_through_suspends(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Order")
    await create_topic(ns, topic)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(60):
            key = f"k{i % 5}"
            await producer.send(Message(topic, f"{key}:{i}".encode()), selector=select_by_hash, arg=key)
    seen: dict[str, list[int]] = collections.defaultdict(list)
    by_queue: dict[int, list[int]] = collections.defaultdict(list)
    suspended: set[int] = set()
    config = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            suspend_current_queue_time_millis=50)
    consumer = PushConsumer(unique("og"), config=config, client_config=client_config(ns, "orderly"))
    consumer.subscribe(topic)

    def listener(msgs: list[MessageExt], ctx: object) -> ConsumeOrderlyStatus:
        for m in msgs:
            key, number = m.body.decode().split(":")
            if int(number) % 7 == 0 and int(number) not in suspended:
                suspended.add(int(number))
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            seen[key].append(int(number))
            by_queue[m.queue_id].append(m.queue_offset)
        return ConsumeOrderlyStatus.SUCCESS

    consumer.register_message_listener_orderly(listener)
    await consumer.start()
    try:
        await wait_until(lambda: sum(map(len, seen.values())) >= 60, what="orderly messages")
    finally:
        await consumer.shutdown()
    assert suspended  # the retry-in-place path ran
    for key, numbers in seen.items():
        assert numbers == sorted(numbers) and len(numbers) == 12, key
    for offsets in by_queue.values():
        assert offsets == list(range(len(offsets)))


async def test_consume_from_first_last_and_timestamp(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Where")
    await create_topic(ns, topic, 2)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(6):
            await producer.send(Message(topic, f"old-{i}".encode()))
        # The timestamp has second resolution: start it at the next whole second.
        await asyncio.sleep(1.05 - time.time() % 1)
        stamp = datetime.now().strftime("%Y%m%d%H%M%S")
        await asyncio.sleep(0.05)
        for i in range(4):
            await producer.send(Message(topic, f"mid-{i}".encode()))

        sinks: dict[str, list[MessageExt]] = {"first": [], "last": [], "timestamp": []}
        wheres = {"first": ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
                  "last": ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
                  "timestamp": ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                                              consume_timestamp=stamp)}
        consumers = [collecting_consumer(ns, unique(f"g_{name}"), topic, sinks[name], instance=f"w_{name}",
                                         config=wheres[name]) for name in sinks]
        for c in consumers:
            await c.start()
        try:
            await wait_until(lambda: all(len([q for q in c.owned_queues() if q.topic == topic]) == 2
                                         for c in consumers), what="queue ownership")
            await asyncio.sleep(1.0)  # the LAST consumer has fixed its start offsets
            for i in range(3):
                await producer.send(Message(topic, f"new-{i}".encode()))
            await wait_until(lambda: len(sinks["first"]) >= 13 and len(sinks["last"]) >= 3
                             and len(sinks["timestamp"]) >= 7, what="all three groups")
            await asyncio.sleep(0.3)
        finally:
            for c in consumers:
                await c.shutdown()
    names = {k: sorted(m.body.decode().split("-")[0] for m in v) for k, v in sinks.items()}
    assert names["first"] == ["mid"] * 4 + ["new"] * 3 + ["old"] * 6
    assert names["last"] == ["new"] * 3
    assert names["timestamp"] == ["mid"] * 4 + ["new"] * 3


async def test_offsets_survive_consumer_restart(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("Restart"), unique("rg")
    await create_topic(ns, topic)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(20):
            await producer.send(Message(topic, f"a{i}".encode()))
        first: list[MessageExt] = []
        consumer = collecting_consumer(ns, group, topic, first, instance="r1")
        await consumer.start()
        await wait_until(lambda: len(first) >= 20, what="first run")
        await consumer.shutdown()
        for i in range(10):
            await producer.send(Message(topic, f"b{i}".encode()))
    async with Admin(ns) as admin:
        progress = await admin.consumer_progress(group, topic)
    assert sum(p.consumer_offset for p in progress) == 20 and sum(p.lag for p in progress) == 10
    second: list[MessageExt] = []
    consumer = collecting_consumer(ns, group, topic, second, instance="r2")
    await consumer.start()
    try:
        await wait_until(lambda: len(second) >= 10, what="second run")
        await asyncio.sleep(0.5)
    finally:
        await consumer.shutdown()
    assert sorted(m.body for m in second) == sorted(f"b{i}".encode() for i in range(10))


async def test_pull_consumer(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("Pull"), unique("pullg")
    await create_topic(ns, topic, 1)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(10):
            msg = Message(topic, f"{i}".encode())
            msg.tags = "even" if i % 2 == 0 else "odd"
            await producer.send(msg)
    async with PullConsumer(group, namesrv_addr=ns) as consumer:
        (mq,) = await consumer.fetch_subscribe_message_queues(topic)
        assert (await consumer.min_offset(mq), await consumer.max_offset(mq)) == (0, 10)
        found = await consumer.pull(mq, "*", 0, 4)
        assert found.pull_status is PullStatus.FOUND and found.next_begin_offset == 4
        assert [m.body for m in found.msgs] == [b"0", b"1", b"2", b"3"]
        assert found.msgs[0].properties["MAX_OFFSET"] == "10"
        even = await consumer.pull(mq, "even", 0, 32)
        assert [m.body for m in even.msgs] == [b"0", b"2", b"4", b"6", b"8"]
        none = await consumer.pull(mq, "*", 10, 32)
        assert none.pull_status is PullStatus.NO_NEW_MSG and not none.msgs
        assert await consumer.fetch_consume_offset(mq) == -1
        consumer.update_consume_offset(mq, 4)

        async def late_send() -> None:
            await asyncio.sleep(0.5)
            async with Producer(unique("pg"), namesrv_addr=ns) as late:
                await late.send(Message(topic, b"late"))

        sender = asyncio.create_task(late_send())
        started = time.monotonic()
        held = await consumer.pull_block_if_not_found(mq, "*", 10, 32)  # long polling: held, then woken
        waited = time.monotonic() - started
        await sender
        assert held.pull_status is PullStatus.FOUND and [m.body for m in held.msgs] == [b"late"]
        assert 0.3 < waited < 10
    async with PullConsumer(group, namesrv_addr=ns) as again:
        assert await again.fetch_consume_offset(mq, from_store=True) == 4  # persisted at shutdown


async def test_orderly_queue_never_consumed_by_two_consumers_at_once(cluster: Cluster) -> None:
    """A second orderly consumer joins mid-stream: queues move over, but the broker lock and
    the consume lock keep any queue inside at most one listener at a time."""
    ns, topic, group = cluster.namesrv_addr, unique("OrderHandover"), unique("ohg")
    await create_topic(ns, topic)
    active: dict[int, str] = {}
    overlaps: list[int] = []
    seen: set[bytes] = set()
    config = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)

    def make(name: str) -> PushConsumer:
        consumer = PushConsumer(group, config=config, client_config=client_config(ns, name))
        consumer.subscribe(topic)

        async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeOrderlyStatus:
            queue_id = msgs[0].queue_id
            if queue_id in active:
                overlaps.append(queue_id)
            active[queue_id] = name
            await asyncio.sleep(0.01)
            del active[queue_id]
            seen.update(m.body for m in msgs)
            return ConsumeOrderlyStatus.SUCCESS

        consumer.register_message_listener_orderly(listener)
        return consumer

    first, second = make("oh1"), make("oh2")
    await first.start()
    try:
        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            for i in range(120):
                await producer.send(Message(topic, f"{i}".encode()), selector=select_by_hash, arg=f"k{i % 8}")
                if i == 40:
                    await second.start()
        await wait_until(lambda: len(seen) >= 120, timeout=40, what="every message")
        await wait_until(lambda: bool([q for q in second.owned_queues() if q.topic == topic]), what="a handover")
    finally:
        await second.shutdown()
        await first.shutdown()
    assert not overlaps
    assert seen == {f"{i}".encode() for i in range(120)}
