"""The ``lakemq`` source over a topic on two brokers: a real NameServer and two masters on
loopback, each broker's store tiered into one local lake by its own ``lakemq tier run``, so the
lake's end differs per broker. A batch read is the union of both brokers' lake rows and hot
tails, each message once; a stream from ``earliest`` reads both brokers' history and then their
live logs, each message once, and picks up after one broker's tier run moved its lake's end.

One cluster for the module and the worker's one Spark session."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.jobs.sources import register_sources
from tests.cli_in_process import tier_run_in_process
from tests.cluster import Cluster, start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKERS = ("broker-a", "broker-b")
TOPIC = "two_broker_orders"


@dataclass
class Two:
    cluster: Cluster
    root: Path
    lake: Path
    sent: set[str]  # keys of every acknowledged message

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    def store(self, broker: str) -> Path:
        return self.root / broker / "store"


async def _produce(namesrv: str, first: int, count: int, *, create: bool = False) -> tuple[set[str], set[str]]:
    """Send ``count`` messages; (their keys, the brokers that acknowledged them)."""
    if create:
        async with Admin(namesrv) as admin:
            assert await admin.create_topic(TOPIC, queue_nums=2) == list(BROKERS)
            deadline = time.monotonic() + 15
            while TOPIC not in await admin.list_topics():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
    keys: set[str] = set()
    brokers: set[str] = set()
    async with Producer("two_broker_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            msg = Message(TOPIC, f"order-{i}".encode() * 20)
            msg.keys = key = f"key-{i}"
            result = await producer.send(msg)
            keys.add(key)
            brokers.add(result.message_queue.broker_name)
    return keys, brokers


def _send(two: Two, first: int, count: int) -> None:
    keys, brokers = asyncio.run(_produce(two.namesrv, first, count))
    assert brokers == set(BROKERS), brokers  # the producer spreads the topic's queues over both
    two.sent |= keys


def _tier(spark: Any, two: Two, broker: str) -> None:
    done = tier_run_in_process(spark, two.root, two.store(broker), two.lake, broker, "--no-retention")
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def two(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    root = tmp_path_factory.mktemp("two_brokers")
    with start_cluster(root, brokers=BROKERS) as cluster:
        state = Two(cluster, root, root / "lake", set())
        keys, brokers = asyncio.run(_produce(state.namesrv, 0, 200, create=True))
        assert brokers == set(BROKERS), brokers
        state.sent |= keys
        for broker in BROKERS:
            _tier(spark, state, broker)
        _send(state, 200, 80)  # hot on both brokers
        register_sources(spark)
        yield state


def _lake_hosts(spark: Any, two: Two) -> dict[str, int]:
    rows = (spark.read.format("delta").load(str(two.lake / "messages")).where(f"topic = '{TOPIC}'")
            .groupBy("store_host").count().collect())
    return {r["store_host"]: int(r["count"]) for r in rows}


def _assert_once(rows: list[Any], expected: set[str]) -> None:
    keys = [r["keys"] for r in rows]
    assert len(keys) == len(set(keys)), "a message twice"
    assert set(keys) == expected
    # Each broker's queues hold offsets 0.. without a gap.
    per_queue: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        per_queue.setdefault((r["store_host"], r["queue_id"]), []).append(r["queue_offset"])
    assert len({host for host, _ in per_queue}) == 2, per_queue.keys()
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values()), per_queue


def test_a_read_is_both_brokers_lake_rows_and_hot_tails_each_once(spark: Any, two: Two) -> None:
    in_lake = _lake_hosts(spark, two)
    assert len(in_lake) == 2 and sum(in_lake.values()) == 200, in_lake  # both brokers tiered
    frame = (spark.read.format("lakemq").option("namesrv", two.namesrv).option("lake", str(two.lake))
             .option("topic", TOPIC).load())
    _assert_once(frame.select("keys", "store_host", "queue_id", "queue_offset").collect(), two.sent)


@pytest.mark.timeout(900)  # two tier runs and two streams on a shared 2-core machine
def test_a_stream_from_earliest_reads_both_brokers_once_across_one_brokers_tier_run(spark: Any, two: Two) -> None:
    def run() -> tuple[list[Any], list[dict[str, Any]]]:
        query = (spark.readStream.format("lakemq").option("namesrv", two.namesrv).option("lake", str(two.lake))
                 .option("topic", TOPIC).load().select("keys", "store_host", "queue_id", "queue_offset")
                 .writeStream.format("delta").option("checkpointLocation", str(two.root / "checkpoints" / "s"))
                 .trigger(availableNow=True).start(str(two.root / "sinks" / "s")))
        assert query.awaitTermination(300), "the stream did not finish within 300 s"
        assert query.exception() is None, query.exception()
        progress = [json.loads(p.json) for p in query.recentProgress]
        return spark.read.format("delta").load(str(two.root / "sinks" / "s")).collect(), progress

    rows, _ = run()
    _assert_once(rows, two.sent)
    # broker-a's lake end moves past where the stream stopped; broker-b's stays.
    _send(two, 1000, 60)
    before = _lake_hosts(spark, two)
    _tier(spark, two, "broker-a")
    after = _lake_hosts(spark, two)
    assert sum(after.values()) > sum(before.values()), (before, after)
    _send(two, 2000, 40)
    rows, progress = run()
    _assert_once(rows, two.sent)
    assert sum(p["numInputRows"] for p in progress) == 100  # only what came since
