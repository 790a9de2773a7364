"""The official RocketMQ C++ client (PyPI rocketmq 0.4.4, librocketmq 2.0) against real
lakemq NameServer and broker processes, unchanged: its Producer (sync, oneway, orderly) and
PushConsumer (tag expressions, orderly, offsets kept on the broker), and both directions
between it and lakemq's own Python client.

Every C++ client runs in its own process (tests/compat/cpp_driver.py), bounded in time.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from typing import Any

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from lakemq.client.admin import Admin
from lakemq.client.config import ClientConfig
from tests.cluster import Cluster
from tests.compat.cpp_client import CppClient, Delivery

pytest.importorskip("rocketmq.client")
pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

_names = itertools.count()
PROPS = ("color", "seq", "UNIQ_KEY")


def unique(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000) % 10_000_000}_{next(_names)}"


def spec(topic: str, i: int, tags: str, **extra: Any) -> dict[str, Any]:
    return {"topic": topic, "body": f"{topic}-body-{i}", "tags": tags, "keys": f"key-{i} alt-{i}",
            "props": {"color": ("red", "green", "blue")[i % 3], "seq": str(i)}, **extra}


def assert_once(deliveries: list[Delivery], expected: list[dict[str, Any]]) -> dict[str, Delivery]:
    """Each expected message delivered exactly once, nothing else, everything intact."""
    assert not any(d.failed for d in deliveries)
    bodies = [d.body for d in deliveries]
    assert len(bodies) == len(set(bodies)), f"duplicates: {[b for b, n in collections.Counter(bodies).items() if n > 1]}"
    assert sorted(bodies) == sorted(m["body"] for m in expected)
    by_body = {d.body: d for d in deliveries}
    for m in expected:
        d = by_body[m["body"]]
        assert (d.topic, d.tags, d.keys) == (m["topic"], m["tags"], m["keys"])
        assert d.props["color"] == m["props"]["color"] and d.props["seq"] == m["props"]["seq"]
        assert d.reconsume_times == 0
    return by_body


async def topic_total(ns: str, topic: str) -> int:
    async with Admin(ns) as admin:
        return sum(s.max_offset for s in await admin.topic_stats(topic))


async def committed(ns: str, group: str, topic: str) -> dict[int, int]:
    async with Admin(ns) as admin:
        return {p.mq.queue_id: p.consumer_offset for p in await admin.consumer_progress(group, topic)}


async def test_sync_send_and_tag_filtered_push_consumer(cluster: Cluster, cpp: CppClient) -> None:
    topic = unique("CppSync")
    messages = [spec(topic, i, ("TagA", "TagB", "TagC")[i % 3]) for i in range(30)]
    results = await cpp.produce(unique("PG"), messages)
    assert all(r["status"] == "OK" for r in results)
    assert len({r["msg_id"] for r in results}) == 30 and all(len(r["msg_id"]) == 32 for r in results)

    wanted = [m for m in messages if m["tags"] in ("TagA", "TagB")]
    deliveries = await cpp.consume(unique("CG"), topic, expect=len(wanted), expression="TagA || TagB", props=PROPS)
    by_body = assert_once(deliveries, wanted)
    for m, r in zip(messages, results):
        if m["tags"] == "TagC":
            continue
        d = by_body[m["body"]]
        # The id the producer was told is the one the consumer sees, and the offset is the queue offset.
        assert d.id == d.props["UNIQ_KEY"] == r["msg_id"]
        assert d.queue_offset == r["offset"]
    # TagC was stored, only filtered out.
    assert await topic_total(cluster.namesrv_addr, topic) == 30


async def test_send_oneway(cluster: Cluster, cpp: CppClient) -> None:
    topic = unique("CppOneway")
    messages = [spec(topic, i, "TagA") for i in range(20)]
    results = await cpp.produce(unique("PG"), messages, mode="oneway")
    assert all(r["status"] == "SENT" for r in results)
    assert_once(await cpp.consume(unique("CG"), topic, expect=20, props=PROPS), messages)


async def test_send_batch(cluster: Cluster, cpp: CppClient) -> None:
    topic = unique("CppBatch")
    messages = [spec(topic, i, ("TagA", "TagB")[i % 2]) for i in range(16)]
    [result] = await cpp.produce(unique("PG"), messages, mode="batch")
    assert result["status"] == "OK"
    deliveries = await cpp.consume(unique("CG"), topic, expect=8, expression="TagB", props=PROPS)
    assert_once(deliveries, [m for m in messages if m["tags"] == "TagB"])
    # One batch lands in one queue, in order, starting at the offset the producer was told.
    assert len({d.queue_id for d in deliveries}) == 1
    assert sorted(d.queue_offset for d in deliveries) == list(range(result["offset"] + 1, result["offset"] + 16, 2))
    assert len({d.id for d in deliveries}) == 8


async def test_send_orderly_keeps_per_key_order(cluster: Cluster, cpp: CppClient) -> None:
    topic = unique("CppOrder")
    # Four ordering keys, interleaved; the 0.4.4 selector puts key k on queue k % queues.
    messages = [spec(topic, n, "TagA", order=n % 4) for n in range(40)]
    results = await cpp.produce(unique("PG"), messages, mode="orderly")
    assert all(r["status"] == "OK" for r in results)
    deliveries = await cpp.consume(unique("CG"), topic, expect=40, orderly=True, props=PROPS)
    assert_once(deliveries, messages)
    per_key: dict[int, list[Delivery]] = collections.defaultdict(list)
    for d in deliveries:
        per_key[int(d.props["seq"] or 0) % 4].append(d)
    for key, seen in per_key.items():
        assert {d.queue_id for d in seen} == {key}
        seqs = [int(d.props["seq"] or 0) for d in seen]
        assert seqs == sorted(seqs) == list(range(key, 40, 4))
        assert [d.queue_offset for d in seen] == list(range(10))


async def test_python_consumer_reads_what_cpp_produced(cluster: Cluster, cpp: CppClient) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("CppToPy"), unique("CG")
    messages = [spec(topic, i, ("TagA", "TagB")[i % 2]) for i in range(16)]
    results = await cpp.produce(unique("PG"), messages)
    ids = {m["body"]: r["msg_id"] for m, r in zip(messages, results)}

    received: list[MessageExt] = []
    consumer = PushConsumer(group, config=ConsumerConfig(
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
        client_config=ClientConfig(namesrv_addr=ns, instance_name=unique("py"), rebalance_interval=1000))
    consumer.subscribe(topic, "TagB")

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        received.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    try:
        wanted = [m for m in messages if m["tags"] == "TagB"]
        deadline = time.monotonic() + 30
        while len(received) < len(wanted) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # room for a wrongly delivered TagA or a duplicate
    finally:
        await consumer.shutdown()
    assert sorted(m.body.decode() for m in received) == sorted(m["body"] for m in wanted)
    for msg in received:
        m = next(w for w in wanted if w["body"] == msg.body.decode())
        assert (msg.topic, msg.tags, msg.keys) == (topic, "TagB", m["keys"].split())
        assert msg.properties["color"] == m["props"]["color"] and msg.properties["seq"] == m["props"]["seq"]
        assert msg.msg_id == msg.properties["UNIQ_KEY"] == ids[m["body"]]


async def test_cpp_consumer_reads_what_python_produced(cluster: Cluster, cpp: CppClient) -> None:
    ns, topic = cluster.namesrv_addr, unique("PyToCpp")
    sent: list[dict[str, Any]] = []
    async with Producer(unique("PG"), namesrv_addr=ns) as producer:
        for i in range(12):
            m = spec(topic, i, ("TagA", "TagX")[i % 2])
            msg = Message(topic, m["body"].encode())
            msg.tags, msg.keys = m["tags"], m["keys"].split()
            msg.properties.update(m["props"])
            result = await producer.send(msg)
            assert result.send_status is SendStatus.SEND_OK
            sent.append({**m, "msg_id": result.msg_id})
    wanted = [m for m in sent if m["tags"] == "TagA"]
    by_body = assert_once(await cpp.consume(unique("CG"), topic, expect=len(wanted), expression="TagA",
                                            props=PROPS), wanted)
    for m in wanted:
        assert by_body[m["body"]].id == by_body[m["body"]].props["UNIQ_KEY"] == m["msg_id"]


async def test_offsets_committed_to_broker_survive_consumer_and_broker_restart(cluster: Cluster, cpp: CppClient) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("CppOffsets"), unique("CG")
    first = [spec(topic, i, "TagA") for i in range(20)]
    await cpp.produce(unique("PG"), first)
    assert_once(await cpp.consume(group, topic, expect=20, props=PROPS), first)
    # A clean shutdown persists the group's offsets to the broker: all 20 are committed.
    offsets = await committed(ns, group, topic)
    assert sum(offsets.values()) == 20, offsets

    cluster.restart_broker()
    assert await committed(ns, group, topic) == offsets  # kept in the broker's consumerOffset.json
    second = [spec(topic, i, "TagA") for i in range(20, 30)]
    await cpp.produce(unique("PG"), second)
    assert_once(await cpp.consume(group, topic, expect=10, props=PROPS), second)


async def test_killed_consumer_resumes_from_the_committed_offsets(cluster: Cluster, cpp: CppClient) -> None:
    """SIGKILL skips the final persist: exactly the messages at or past the offsets the broker
    had come again (at-least-once), nothing before them. The C++ client commits with its next
    pull of a queue and every 5 s (its persist timer), so the redelivered tail is bounded by
    what it consumed in the last 5 s before the kill (observed: all 40 committed within 5 s)."""
    ns, topic, group = cluster.namesrv_addr, unique("CppKill"), unique("CG")
    first = [spec(topic, i, "TagA") for i in range(40)]
    await cpp.produce(unique("PG"), first)
    consumer = cpp.consumer(group, topic, expect=10_000, props=PROPS, timeout=60)
    await consumer.start()
    await consumer.wait_for(40)
    await asyncio.sleep(1.0)  # less than the client's 5 s persist timer: usually leaves a tail
    await consumer.kill()
    before = assert_once(consumer.deliveries, first)
    offsets = await committed(ns, group, topic)

    second = [spec(topic, i, "TagA") for i in range(40, 50)]
    await cpp.produce(unique("PG"), second)
    uncommitted = [m for m in first
                   if before[m["body"]].queue_offset >= offsets.get(before[m["body"]].queue_id, 0)]
    again = await cpp.consume(group, topic, expect=len(uncommitted) + 10, props=PROPS)
    assert_once(again, uncommitted + second)


@pytest.mark.slow
async def test_reconsume_later_is_sent_back_and_redelivered(cluster: Cluster, cpp: CppClient) -> None:
    """A listener answering RECONSUME_LATER makes the C++ client send the message back
    (CONSUMER_SEND_MSG_BACK); the broker redelivers it through %RETRY%group after the retry
    delay (level 3: 10 s) with reconsume times 1 and the message intact. The C API answers
    for a whole pulled batch, so each queue holds one message here (4 sends, 4 queues)."""
    topic, group = unique("CppRetry"), unique("CG")
    messages = [spec(topic, i, "TagA") for i in range(4)]
    await cpp.produce(unique("PG"), messages)
    refused = (messages[1]["body"], messages[3]["body"])
    deliveries = await cpp.consume(group, topic, expect=6, fail_first=refused, props=PROPS, idle=3.0, timeout=60)
    first = [d for d in deliveries if d.reconsume_times == 0]
    again = [d for d in deliveries if d.reconsume_times > 0]
    assert sorted(d.body for d in first) == sorted(m["body"] for m in messages)
    assert sorted(d.body for d in first if d.failed) == sorted(refused)
    assert sorted(d.body for d in again) == sorted(refused)
    by_body = {m["body"]: m for m in messages}
    for d in again:
        m = by_body[d.body]
        assert not d.failed and d.reconsume_times == 1
        assert (d.tags, d.keys, d.props["color"], d.props["seq"]) == (m["tags"], m["keys"], m["props"]["color"],
                                                                    m["props"]["seq"])
        assert d.id == next(f.id for f in first if f.body == d.body)  # same UNIQ_KEY: the same message
