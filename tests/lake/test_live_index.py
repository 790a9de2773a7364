"""The ``lakemq`` source's key reads end to end (lakemq.jobs.live_index): a real NameServer and
broker on loopback (maxMsgsNumBatch 32), part of a topic tiered into a local lake, the rest only
on the broker, messages with several keys. A ``keys`` filter answers the same rows through the
brokers' key index as by pulling (option keyIndex=false), across the lake/hot boundary; the
index path pulls nothing (the broker's count of messages returned to pulls stays put); a key
whose index answer is cut at maxMsgsNumBatch, a broker restarted (its index vouches only for what
it dispatched since) and a broker with the index off are pulled instead, with the same answer. On
the lake side the planner reads only the files the lake's ``message_keys`` points to.

One cluster for the module (its broker restarted by the last test) and the worker's Spark session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.topics import create_routed_topic
from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.jobs.key_index import index_complete
from lakemq.jobs.live_filters import Pushed
from lakemq.jobs.live_plan import lake_cut
from lakemq.jobs.sources import register_sources
from lakemq.tiering.lake_fs import LakeLocation
from tests.cli_in_process import tier_run_in_process
from tests.cluster import Cluster, start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "keyed_orders"
TIERED, HOT = 200, 100
BATCH = 32  # the broker's maxMsgsNumBatch: "bulk" (43 messages) is cut, "s-0" (21 with "s-0 x-N") is not


def keys_of(i: int) -> str:
    if i % 7 == 0:
        return "bulk"
    if i % 4 == 0:
        return f"s-{i % 3}" if i % 8 else f"s-{i % 3} x-{i}"
    return f"k-{i} g-{i % 5}"


@dataclass
class Keyed:
    cluster: Cluster
    lake: Path
    sent: dict[int, str]  # message number -> its KEYS

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr


async def _produce(namesrv: str, numbers: range, *, create: bool = False) -> dict[int, str]:
    if create:
        await create_routed_topic(namesrv, TOPIC, queue_nums=4)
    sent: dict[int, str] = {}
    async with Producer("keyed_producer", namesrv_addr=namesrv) as producer:
        for i in numbers:
            msg = Message(TOPIC, f"order-{i}".encode())
            msg.keys = keys_of(i)
            await producer.send(msg)
            sent[i] = keys_of(i)
    return sent


@pytest.fixture(scope="module")
def keyed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    root = tmp_path_factory.mktemp("keyed")
    lake = root / "lake"
    with start_cluster(root, brokers=(BROKER,), broker_conf={"maxMsgsNumBatch": str(BATCH)}) as cluster:
        state = Keyed(cluster, lake, asyncio.run(_produce(cluster.namesrv_addr, range(TIERED), create=True)))
        done = tier_run_in_process(spark, root, root / BROKER / "store", lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]
        state.sent.update(asyncio.run(_produce(cluster.namesrv_addr, range(TIERED, TIERED + HOT))))
        register_sources(spark)
        yield state


def _pulled(keyed: Keyed) -> int:
    """Messages the broker returned to pulls since it started."""
    async def ask() -> int:
        async with Admin(keyed.namesrv) as admin:
            info = await admin.broker_runtime_info(keyed.cluster.broker_addr(BROKER))
        return int(info["msgGetTotalTodayNow"])
    return asyncio.run(ask())


def _bodies(spark: Any, keyed: Keyed, where: str, **options: str) -> list[str]:
    reader = spark.read.format("lakemq").option("namesrv", keyed.namesrv).option("lake", str(keyed.lake))
    for key, value in {"topic": TOPIC, **options}.items():
        reader = reader.option(key, value)
    rows = reader.load().where(where).selectExpr("CAST(body AS STRING) AS b").collect()
    bodies = [r["b"] for r in rows]
    assert len(bodies) == len(set(bodies)), bodies  # no row twice
    return sorted(bodies)


def _expected(keyed: Keyed, values: set[str]) -> list[str]:
    return sorted(f"order-{i}" for i, k in keyed.sent.items() if k in values)


def _both_ways(spark: Any, keyed: Keyed, where: str, values: set[str]) -> tuple[int, int]:
    """The rows of ``where`` by the index path and by pulling, both checked against what was
    sent; returns the messages pulled by each."""
    before = _pulled(keyed)
    by_index = _bodies(spark, keyed, where)
    middle = _pulled(keyed)
    by_pull = _bodies(spark, keyed, where, keyIndex="false")
    after = _pulled(keyed)
    assert by_index == by_pull == _expected(keyed, values), where
    return middle - before, after - middle


def test_key_reads_answer_from_the_index_across_the_lake_boundary(spark: Any, keyed: Keyed) -> None:
    lake_rows = int(spark.read.format("delta").load(str(keyed.lake / "messages")).count())
    assert 0 < lake_rows < len(keyed.sent)
    # A multi-key message in the hot tail; values in the lake, the hot tail, both, and none.
    assert _both_ways(spark, keyed, "keys = 'k-250 g-0'", {"k-250 g-0"})[0] == 0
    values = {"k-5 g-0", "k-250 g-0", "s-0", "k-999 g-1"}
    in_list = ", ".join(f"'{v}'" for v in sorted(values))
    index_pulls, pulls = _both_ways(spark, keyed, f"keys IN ({in_list})", values)
    assert index_pulls == 0 and pulls > 0
    assert any(i < TIERED for i, k in keyed.sent.items() if k == "s-0")
    assert any(i >= TIERED for i, k in keyed.sent.items() if k == "s-0")
    # The index finds "s-0" in "s-0 x-N" too: only the rows whose whole keys are the value are kept.
    assert 0 < len(_expected(keyed, {"s-0"})) < sum(1 for k in keyed.sent.values() if "s-0" in k.split())
    # A time range applies to the rows the look-up found.
    times = sorted(r["store_timestamp"] for r in spark.read.format("lakemq").option("namesrv", keyed.namesrv)
                   .option("lake", str(keyed.lake)).option("topic", TOPIC).load().where("keys = 's-0'")
                   .select("store_timestamp").collect())
    since = times[len(times) // 2]
    before = _pulled(keyed)
    ranged = _bodies(spark, keyed, f"keys = 's-0' AND store_timestamp >= {since}")
    assert _pulled(keyed) == before
    assert len(ranged) == sum(1 for t in times if t >= since)


def test_a_cut_index_answer_is_pulled_instead(spark: Any, keyed: Keyed) -> None:
    bulk = sum(1 for k in keyed.sent.values() if k == "bulk")
    assert bulk > BATCH
    index_pulls, _ = _both_ways(spark, keyed, "keys = 'bulk'", {"bulk"})
    assert index_pulls > 0  # the index held 32 of 43: the hot tail was pulled


def test_a_restarted_broker_and_a_broker_with_the_index_off_are_pulled(spark: Any, keyed: Keyed) -> None:
    where = "keys IN ('k-250 g-0', 's-0')"
    assert _both_ways(spark, keyed, where, {"k-250 g-0", "s-0"})[0] == 0
    # Restarted, the broker's index vouches only for records from its new start, past the lake's end.
    keyed.cluster.restart_broker(BROKER)
    assert _both_ways(spark, keyed, where, {"k-250 g-0", "s-0"})[0] > 0
    keyed.cluster.restart_broker(BROKER, {"messageIndexEnable": "false"})
    keyed.sent.update(asyncio.run(_produce(keyed.namesrv, range(1000, 1010))))
    assert _both_ways(spark, keyed, "keys IN ('k-250 g-0', 'k-1001 g-1')", {"k-250 g-0", "k-1001 g-1"})[0] > 0


def test_the_lake_side_reads_only_the_files_message_keys_points_to(keyed: Keyed) -> None:
    """With keyIndex the planner keeps the lake files whose CommitLog offsets hold a key's
    messages in ``message_keys``; a key only in the hot tail reads no lake file at all."""
    lake = LakeLocation.of(str(keyed.lake))
    assert index_complete(lake)

    def files(value: str, key_index: bool) -> int:
        pushed = Pushed(topics=frozenset([TOPIC])).taken("keys", [value])
        return len(lake_cut(lake, pushed, key_index=key_index).files)

    every = files("k-250 g-0", False)
    assert every > 0
    assert files("k-250 g-0", True) == 0  # sent after the tier run: in no lake file
    assert 0 < files("k-5 g-0", True) <= every
    assert files("no-such-key", True) == 0
