"""The official C++ client reads tiered history: a broker with a lake (``lakeUri``) whose oldest
CommitLog files were tiered by ``lakemq tier run`` and then expired; a C++ PushConsumer whose
group starts at offset 0 gets every message once, the lake's part re-encoded by the broker and
the hot part as stored, with body, tags, keys and properties intact."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bench.topics import create_routed_topic
from lakemq.client import PullConsumer
from lakemq.client.admin import Admin
from lakemq.tiering.seal import commitlog_files
from tests.cluster import cold_read_broker_conf, start_cluster, tier_run_process
from tests.compat.cpp_client import CppClient

pytest.importorskip("rocketmq.client")
pytestmark = [pytest.mark.spark, pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]

BROKER, TOPIC, GROUP = "broker-a", "CppColdOrders", "CppColdGroup"
COUNT = 120


def _spec(i: int) -> dict[str, object]:
    return {"topic": TOPIC, "body": f"cold-{i}-" + "x" * 900, "tags": ("paid", "new")[i % 2],
            "keys": f"order-{i}", "props": {"seq": str(i)}}


async def _queues_hot_min(namesrv: str) -> list[int]:
    async with PullConsumer("CppColdProbe", namesrv_addr=namesrv) as probe:
        return [await probe.min_offset(mq) for mq in await probe.fetch_subscribe_message_queues(TOPIC)]


async def _start_group_at_zero(namesrv: str) -> None:
    """What a user does to read history (RocketMQ's reset of a group's offsets): offset 0 on
    every queue, below the hot min, so the broker answers those pulls from the lake."""
    async with PullConsumer(GROUP, namesrv_addr=namesrv) as group:
        for mq in await group.fetch_subscribe_message_queues(TOPIC):
            group.update_consume_offset(mq, 0)
        await group.persist_offsets()
    async with Admin(namesrv) as admin:
        assert {p.consumer_offset for p in await admin.consumer_progress(GROUP, TOPIC)} == {0}


async def test_cpp_push_consumer_reads_lake_then_hot_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=cold_read_broker_conf(lake)) as cluster:
        namesrv = cluster.namesrv_addr
        store = tmp_path / BROKER / "store"
        await create_routed_topic(namesrv, TOPIC, queue_nums=2)
        cpp = CppClient(namesrv, tmp_path / "cpp")
        messages = [_spec(i) for i in range(COUNT)]
        results = await cpp.produce("CppColdProducer", messages)
        assert [r["status"] for r in results] == ["OK"] * COUNT
        first_file = commitlog_files(store)[0].start

        done = await asyncio.to_thread(tier_run_process, tmp_path, store, lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 30
        while commitlog_files(store)[0].start == first_file:  # the broker's guarded expiry
            assert time.monotonic() < deadline, "the broker never expired the tiered files"
            await asyncio.sleep(0.2)
        deadline = time.monotonic() + 30
        while not all(m > 0 for m in await _queues_hot_min(namesrv)):  # mappings dropped
            assert time.monotonic() < deadline, "the hot tier still starts at offset 0"
            await asyncio.sleep(0.2)

        await _start_group_at_zero(namesrv)
        deliveries = await cpp.consume(GROUP, TOPIC, expect=COUNT, props=("seq",), timeout=120)

    bodies = [d.body for d in deliveries]
    assert len(bodies) == len(set(bodies)) == COUNT, f"{len(bodies)} deliveries, {len(set(bodies))} distinct"
    by_body = {d.body: d for d in deliveries}
    for m in messages:
        d = by_body[m["body"]]
        assert (d.topic, d.tags, d.keys, d.props["seq"]) == (TOPIC, m["tags"], m["keys"], m["props"]["seq"])
    for queue_id in {d.queue_id for d in deliveries}:
        offsets = sorted(d.queue_offset for d in deliveries if d.queue_id == queue_id)
        assert offsets == list(range(len(offsets))), f"queue {queue_id} has gaps or repeats"
