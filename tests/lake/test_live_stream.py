"""``spark.readStream.format("lakemq")`` end to end: a real NameServer and broker on loopback,
part of a topic tiered into a local lake, the rest only on the broker; streams into a Delta
sink with Trigger.AvailableNow. From ``earliest`` the sink holds every acknowledged message
once (lake history, then the live tail, no gap or duplicate at the switch); a restart from the
checkpoint adds only what came since, even after a tier run moved the switch; the batch limit,
``latest``, a time and per-queue JSON start where they say.

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
from pyspark.sql.streaming.datasource import ReadAllAvailable

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.jobs.live_clients import drop_client, kept_client
from lakemq.jobs.live_plan import HotSpan
from lakemq.jobs.live_source import HotPart
from lakemq.jobs.live_stream import LiveStreamReader, cap_offsets, pack_spans
from lakemq.jobs.sources import register_sources
from tests.cli_in_process import tier_run_in_process
from tests.cluster import Cluster, start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "stream_orders"
TIERED, HOT = 200, 80


@dataclass
class Live:
    cluster: Cluster
    root: Path
    lake: Path
    store: Path
    sent: set[str]  # keys of every message acknowledged so far

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr


async def _produce(namesrv: str, first: int, count: int, *, create: bool = False) -> set[str]:
    if create:
        await create_routed_topic(namesrv, TOPIC, queue_nums=4)
    sent: set[str] = set()
    async with Producer("stream_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            msg = Message(TOPIC, f"order-{i}".encode())
            msg.keys = f"key-{i}"
            await producer.send(msg)
            sent.add(f"key-{i}")
    return sent


@pytest.fixture(scope="module")
def live(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("stream")
    lake = root / "lake"
    with start_cluster(root, brokers=(BROKER,)) as cluster:
        state = Live(cluster, root, lake, root / BROKER / "store", set())
        state.sent |= asyncio.run(_produce(state.namesrv, 0, TIERED, create=True))
        done = tier_run_in_process(spark, root, state.store, lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]
        state.sent |= asyncio.run(_produce(state.namesrv, TIERED, HOT))
        register_sources(spark)
        yield state


def _run(spark: Any, live: Live, name: str, schema: str | None = None,
         **options: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """One Trigger.AvailableNow run into the Delta sink ``name``: the sink's rows (keys,
    queue_id, queue_offset) and the run's progress reports. ``schema``: the reader's, if given."""
    reader = spark.readStream.format("lakemq").option("namesrv", live.namesrv).option("lake", str(live.lake))
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in {"topic": TOPIC, **options}.items():
        reader = reader.option(key, value)
    sink = live.root / "sinks" / name
    query = (reader.load().select("keys", "queue_id", "queue_offset").writeStream.format("delta")
             .option("checkpointLocation", str(live.root / "checkpoints" / name))
             .trigger(availableNow=True).start(str(sink)))
    assert query.awaitTermination(300), "the stream did not finish within 300 s"
    assert query.exception() is None, query.exception()
    progress = [json.loads(p.json) for p in query.recentProgress]
    return spark.read.format("delta").load(str(sink)).collect(), progress


def _assert_once(rows: list[Any], expected: set[str]) -> None:
    keys = [r["keys"] for r in rows]
    assert len(keys) == len(set(keys)), "a message twice in the sink"
    assert set(keys) == expected
    assert len({(r["queue_id"], r["queue_offset"]) for r in rows}) == len(rows)


@pytest.mark.timeout(900)  # Spark starts, two tier runs and two streams on a shared 2-core machine
def test_earliest_reads_lake_then_hot_once_and_restarts_without_duplicates(spark: Any, live: Live) -> None:
    lake_rows = spark.read.format("delta").load(str(live.lake / "messages")).where(f"topic = '{TOPIC}'").count()
    assert 0 < lake_rows < len(live.sent)  # the switch from lake to broker lies inside the stream
    rows, _ = _run(spark, live, "earliest")
    _assert_once(rows, live.sent)

    # New messages, and a tier run that moves the lake's end past where the stream stopped.
    live.sent |= asyncio.run(_produce(live.namesrv, 1000, 60))
    done = tier_run_in_process(spark, live.root, live.store, live.lake, BROKER, "--no-retention")
    assert done.returncode == 0, done.stderr[-3000:]
    live.sent |= asyncio.run(_produce(live.namesrv, 2000, 30))
    rows, progress = _run(spark, live, "earliest")
    _assert_once(rows, live.sent)
    assert sum(p["numInputRows"] for p in progress) == 90  # only what came since


def test_max_offsets_per_trigger_splits_the_backlog(spark: Any, live: Live) -> None:
    # Read through a schema naming only the sink's columns (the source yields just those).
    rows, progress = _run(spark, live, "limited", "keys string, queue_id int, queue_offset bigint",
                          maxOffsetsPerTrigger="100")
    _assert_once(rows, live.sent)
    counts = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(counts) <= 100 and len(counts) >= len(live.sent) // 100 >= 3, counts


def test_latest_time_and_json_starts(spark: Any, live: Live) -> None:
    rows, _ = _run(spark, live, "latest", startingOffsets="latest")
    assert rows == []
    since = int(time.time() * 1000)
    fresh = asyncio.run(_produce(live.namesrv, 3000, 12))
    live.sent |= fresh
    rows, _ = _run(spark, live, "latest", startingOffsets="latest")
    _assert_once(rows, fresh)
    rows, _ = _run(spark, live, "by_time", startingOffsets=str(since))
    keys = [r["keys"] for r in rows]
    # The broker's time index may place a queue's start one message early, never late.
    assert fresh <= set(keys) and len(keys) == len(set(keys)) <= len(fresh) + 4, keys
    # Queue 0 from offset 10, the other queues from their start.
    start = json.dumps({TOPIC: {BROKER: {"0": 10}}})
    rows, _ = _run(spark, live, "by_json", startingOffsets=start)
    assert all(r["queue_offset"] >= 10 for r in rows if r["queue_id"] == 0)
    everything, _ = _run(spark, live, "everything")
    skipped = {r["keys"] for r in everything if r["queue_id"] == 0 and r["queue_offset"] < 10}
    assert len(skipped) == 10
    _assert_once(rows, live.sent - skipped)


def test_cap_offsets_shares_the_limit_among_queues_behind() -> None:
    start = {"t": {"b": {"0": 0, "1": 5, "2": 9}}}
    latest = {"t": {"b": {"0": 100, "1": 7, "2": 9, "3": 4}}}
    capped = cap_offsets(start, latest, 10)
    # Round one: 3 each (queue 1 needs 2); round two: 1 each to the two still behind.
    assert capped == {"t": {"b": {"0": 4, "1": 7, "2": 9, "3": 4}}}
    assert cap_offsets(start, latest, 1000) == latest


def test_pack_spans_gives_a_queue_its_own_task_only_when_its_messages_are_worth_one() -> None:
    spans = [HotSpan("b", "t", q, 0, size, -1) for q, size in enumerate([300, 20, 0, 90, 5_000])]
    assert [sorted(s.queue_id for s in task) for task in pack_spans(spans)] == [[0, 1, 2, 3, 4]]
    # 25,000 messages: three tasks, the largest ranges spread first.
    big = [HotSpan("b", "t", q, 0, size, -1) for q, size in enumerate([12_000, 8_000, 3_000, 2_000])]
    tasks = pack_spans(big)
    assert sorted(sorted(s.queue_id for s in task) for task in tasks) == [[0], [1], [2, 3]]
    # A backlog's batch: a task per queue, never a queue split.
    assert len(pack_spans([HotSpan("b", "t", q, 0, 50_000, -1) for q in range(8)])) == 8
    assert pack_spans([]) == []


def test_a_small_micro_batch_reads_every_queue_in_one_task(live: Live) -> None:
    """Planned and read in this process as Spark's driver and a worker would: a micro-batch of
    a few hundred messages on 4 queues is one read task, and it holds every message once; the
    planning client is kept across triggers."""
    reader = LiveStreamReader({"namesrv": live.namesrv, "lake": str(live.lake), "topic": TOPIC})
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        client = kept_client(live.namesrv)
        assert reader.latestOffset(start, ReadAllAvailable()) == end
        assert kept_client(live.namesrv) is client  # not started again for the next trigger
        parts = reader.partitions(start, end)
        hot = [p for p in parts if isinstance(p, HotPart)]
        assert len(hot) == 1 and sorted(s.queue_id for s in hot[0].spans) == [0, 1, 2, 3], hot
        keys = [k for part in parts for batch in reader.read(part) for k in batch.column("keys").to_pylist()]
        assert len(keys) == len(set(keys)) and set(keys) == live.sent
    finally:
        drop_client(live.namesrv, kept_client(live.namesrv))


@pytest.mark.timeout(1500)  # three driver JVMs and a tier run on a shared 2-core machine
def test_kill_9_of_the_driver_keeps_the_sink_exactly_once(tmp_path: Path) -> None:
    """tests/lake/stream_soak.py with 2 kills (the script takes --kills 10): the driver is
    killed at random points while a producer runs, a tier run moves the switch in between, and
    after the restarts the Delta sink holds every acknowledged message once."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tests.lake.stream_soak", "--kills", "2", "--tier-every", "2"],
                          capture_output=True, text=True, timeout=1400, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "0 doubled, 0 missing" in done.stdout, done.stdout
