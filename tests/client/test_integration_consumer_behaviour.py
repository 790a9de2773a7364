"""Consumer flow control, re-consumption and the blocking facades, against real processes."""

from __future__ import annotations

import asyncio
import threading
import time

from client_helpers import client_config, unique, wait_until

from lakemq.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    PullStatus,
    PushConsumer,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)
from lakemq.client.admin import Admin
from tests.cluster import Cluster


async def test_flow_control_caps_the_process_queue(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Flow")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        await producer.send_batch([Message(topic, f"{i}".encode()) for i in range(100)])
    gate = asyncio.Event()
    done: list[MessageExt] = []
    config = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            pull_threshold_for_queue=10, pull_batch_size=5)
    consumer = PushConsumer(unique("fg"), config=config, client_config=client_config(ns, "flow"))
    consumer.subscribe(topic)

    async def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        await gate.wait()
        done.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    try:
        await wait_until(lambda: any(q.topic == topic for q in consumer.owned_queues()), what="ownership")
        (mq,) = [q for q in consumer.owned_queues() if q.topic == topic]
        assert consumer._rebalancer is not None
        pq = consumer._rebalancer.process_queues[mq]
        await wait_until(lambda: pq.msg_count > 10, what="the cache to fill")
        await asyncio.sleep(0.5)
        assert 10 < pq.msg_count <= 15  # pulling paused one batch past the threshold
        gate.set()
        await wait_until(lambda: len(done) >= 100, what="draining after the gate opens")
    finally:
        gate.set()
        await consumer.shutdown()
    assert sorted(int(m.body) for m in done) == list(range(100))


async def test_reconsume_later_delivers_again(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Again")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(3):
            await producer.send(Message(topic, f"r{i}".encode()))
    deliveries: list[tuple[bytes, str, int]] = []
    consumer = PushConsumer(unique("ag"), config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
                            client_config=client_config(ns, "again"))
    consumer.subscribe(topic)

    async def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        deliveries.extend((m.body, m.topic, m.reconsume_times) for m in msgs)
        if any(m.body == b"r1" and m.reconsume_times == 0 for m in msgs):
            ctx.delay_level_when_next_consume = 1  # 1 s when the broker takes it back
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    try:
        await wait_until(lambda: len(deliveries) >= 4, timeout=30, what="the second delivery")
    finally:
        await consumer.shutdown()
    assert sorted(b for b, _, _ in deliveries) == [b"r0", b"r1", b"r1", b"r2"]
    again = [d for d in deliveries if d[0] == b"r1"]
    assert again == [(b"r1", topic, 0), (b"r1", topic, 1)]  # the original topic, one more attempt


async def test_a_plain_listener_acknowledges_part_of_a_chunk(cluster: Cluster) -> None:
    """ackIndex, in a consume thread: CONSUME_SUCCESS with ack_index 1 on a chunk of four
    consumed the first two; the other two come back once, one more attempt each."""
    ns, topic = cluster.namesrv_addr, unique("Ack")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        await producer.send_batch([Message(topic, f"a{i}".encode()) for i in range(4)])
    deliveries: list[tuple[bytes, int]] = []
    lock = threading.Lock()
    config = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            consume_message_batch_max_size=4)
    consumer = PushConsumer(unique("kg"), config=config, client_config=client_config(ns, "ack"))
    consumer.subscribe(topic)

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        with lock:
            deliveries.extend((m.body, m.reconsume_times) for m in msgs)
        if len(msgs) == 4:
            ctx.ack_index = 1
            ctx.delay_level_when_next_consume = 1  # 1 s when the broker takes them back
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    try:
        await wait_until(lambda: len(deliveries) >= 6, timeout=30, what="the unacknowledged two again")
        await asyncio.sleep(1.5)  # nothing more comes
    finally:
        await consumer.shutdown()
    assert deliveries[:4] == [(b"a0", 0), (b"a1", 0), (b"a2", 0), (b"a3", 0)]
    assert sorted(deliveries[4:]) == [(b"a2", 1), (b"a3", 1)]


async def test_orderly_queue_dropped_mid_batch_keeps_that_batch_committed(cluster: Cluster) -> None:
    """A rebalance that takes an orderly queue away while a batch is in the listener waits for
    it: the batch's offset reaches the broker before the queue is unlocked, so the next owner
    (or this consumer, getting the queue back) does not consume it again."""
    ns, topic, group = cluster.namesrv_addr, unique("OrderDrop"), unique("odg")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1, order=True)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        await producer.send_batch([Message(topic, f"d{i}".encode()) for i in range(3)])
    entered, gate = asyncio.Event(), asyncio.Event()
    consumed: list[bytes] = []
    consumer = PushConsumer(group, config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                                         consume_message_batch_max_size=3),
                            client_config=client_config(ns, "odrop"))
    consumer.subscribe(topic)

    async def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        entered.set()
        await gate.wait()
        consumed.extend(m.body for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer.register_message_listener_orderly(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(entered.wait(), 20)
        (mq,) = [q for q in consumer.owned_queues() if q.topic == topic]
        assert consumer._rebalancer is not None
        drop = asyncio.ensure_future(consumer._rebalancer.drop(mq))
        await asyncio.sleep(0.2)
        assert not drop.done()  # waiting for the batch in the listener
        gate.set()
        await asyncio.wait_for(drop, 5)
        async with Admin(ns) as admin:
            # The offset update is oneway (as RocketMQ's): wait until the broker has applied it.
            deadline = time.monotonic() + 5
            while True:
                (progress,) = [p for p in await admin.consumer_progress(group, topic) if p.mq == mq]
                if progress.consumer_offset == 3 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            addr = (await admin.masters())[mq.broker_name]
            locked = await admin.api.lock_batch_mq(addr, unique("other"), "other@1", [mq])
        assert progress.consumer_offset == 3
        assert consumed == [b"d0", b"d1", b"d2"]
        assert mq in locked  # unlocked at the broker once the batch was done
    finally:
        gate.set()
        await consumer.shutdown()


def test_blocking_facades(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Sync")
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        results = [producer.send(Message(topic, f"s{i}".encode())) for i in range(6)]
        future = producer.send_async(Message(topic, b"s6"))
        results.append(future.result(10))
        producer.send_oneway(Message(topic, b"s7"))
        assert len({(r.message_queue.queue_id, r.queue_offset) for r in results}) == 7

    got: list[bytes] = []
    lock = threading.Lock()
    consumer = SyncPushConsumer(unique("sg"), config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
                                client_config=client_config(ns, "sync"))
    consumer.subscribe(topic)

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        assert threading.current_thread().name != "lakemq-client-loop"  # plain functions run in workers
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    with consumer:
        deadline = time.monotonic() + 20
        while len(got) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len([q for q in consumer.owned_queues() if q.topic == topic]) == 2
    assert sorted(got) == sorted(f"s{i}".encode() for i in range(8))

    with SyncPullConsumer(unique("spg"), namesrv_addr=ns) as puller:
        queues = puller.fetch_subscribe_message_queues(topic)
        total = 0
        for mq in queues:
            result = puller.pull(mq, "*", 0, 32)
            assert result.pull_status is PullStatus.FOUND
            total += len(result.msgs)
            puller.update_consume_offset(mq, result.next_begin_offset)
        assert total == 8
        assert sum(puller.fetch_consume_offset(mq) for mq in queues) == 8


async def test_a_cancelled_shutdown_still_leaves_the_group(cluster: Cluster) -> None:
    # A consumer whose shutdown was cancelled half-way (its caller timed out while a listener
    # still ran) kept its client instance and heartbeats: the broker listed it in the group
    # for good, and the group's next consumer got half the queues.
    ns, topic, group = cluster.namesrv_addr, unique("Leave"), unique("lg")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=4)
    listening, release = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        listening.set()
        release.wait(10)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    config = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    leaving = PushConsumer(group, config=config, client_config=client_config(ns, "leaving"))
    leaving.subscribe(topic)
    leaving.register_message_listener_concurrently(listener)
    await leaving.start()
    leaving_id = leaving.core.instance.client_id
    staying = PushConsumer(group, config=config, client_config=client_config(ns, "staying"))
    staying.subscribe(topic)
    staying.register_message_listener_concurrently(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    await staying.start()
    try:
        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            for i in range(8):
                await producer.send(Message(topic, f"{i}".encode()))
        await wait_until(listening.is_set, what="a listener of the leaving consumer to run")
        shutdown = asyncio.create_task(leaving.shutdown(await_termination=10))
        await asyncio.sleep(0.2)  # the shutdown now waits for the listener
        shutdown.cancel()
        await asyncio.gather(shutdown, return_exceptions=True)
        release.set()
        broker = await staying.core.instance.any_broker_addr(topic)

        async def members() -> list[str]:
            return sorted(await staying.core.instance.api.get_consumer_id_list(broker, group))

        deadline = time.monotonic() + 20
        while leaving_id in await members() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert await members() == [staying.core.instance.client_id]
        await wait_until(lambda: len([q for q in staying.owned_queues() if q.topic == topic]) == 4,
                         what="the staying consumer to own every queue")
    finally:
        release.set()
        await staying.shutdown()
