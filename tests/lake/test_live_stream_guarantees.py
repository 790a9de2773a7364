"""The ``lakemq`` streaming source's guarantees under the events issue 34 names, each on a real
NameServer and broker on loopback and a local Delta lake, streaming into a Delta sink:

- the switch from lake to brokers while a tier run commits the very range being read;
- ``earliest`` after the broker's guarded retention deleted the hot files the lake holds (the
  history comes from the Delta table, not from the broker's cold reads);
- a topic scaled up while the query runs (the new queues' messages arrive);
- a broker restarted on its store while the query runs (the query goes on, every message once).

The broker deletes its tiered CommitLog files itself (64 KiB files, fileReservedTime=0, its
lakeUri the lake), as a production broker with cold reads does. One cluster and one Spark
session for the module; each test streams its own topic. The broker restart comes last."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.common.message import Message
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import LakeMQError
from lakemq.jobs.sources import register_sources
from lakemq.jobs.tier_run import tier_run
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.seal import commitlog_files
from tests.cli_in_process import tier_run_in_process
from tests.cluster import Cluster, cold_read_broker_conf, start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
PAD = b"x" * 600  # bodies of ~0.6 KiB: a few hundred messages fill several 64 KiB CommitLog files


@dataclass
class Guarded:
    cluster: Cluster
    root: Path
    lake: Path
    store: Path

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr


@pytest.fixture(scope="module")
def guarded(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    root = tmp_path_factory.mktemp("stream_guarantees")
    lake = root / "lake"
    # Small ConsumeQueue files too, so a queue's min offset follows the CommitLog's clean-up.
    conf = cold_read_broker_conf(lake, mappedFileSizeConsumeQueue=str(20 * 40))
    with start_cluster(root, brokers=(BROKER,), broker_conf=conf) as cluster:
        register_sources(spark)
        yield Guarded(cluster, root, lake, root / BROKER / "store")


async def _create(namesrv: str, topic: str, queues: int) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    deadline = time.monotonic() + 30
    while len(await _queues(namesrv, topic)) != queues:  # the name server's route has them all
        assert time.monotonic() < deadline, f"the route of {topic} never showed {queues} queues"
        await asyncio.sleep(0.2)


async def _queues(namesrv: str, topic: str) -> list[MessageQueue]:
    try:
        async with PullConsumer("stream_guarantees_route", namesrv_addr=namesrv) as consumer:
            return sorted(await consumer.fetch_subscribe_message_queues(topic))
    except LakeMQError:
        return []


async def _send(namesrv: str, topic: str, first: int, count: int, queue: int | None = None) -> set[str]:
    sent: set[str] = set()
    async with Producer("stream_guarantees_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            key = f"{topic}-{i}"
            msg = Message(topic, f"{key}:".encode() + PAD)
            msg.keys = key
            await producer.send(msg, mq=None if queue is None else MessageQueue(topic, BROKER, queue))
            sent.add(key)
    return sent


class Trickle:
    """A producer thread sending to ``topic`` until stopped, a send every ``pause`` seconds or so,
    recording each acknowledged key (and, apart, the keys of sends that failed: the broker may
    hold those or not)."""

    def __init__(self, namesrv: str, topic: str, first: int, pause: float = 0.02) -> None:
        self.acked: set[str] = set()
        self.failed: set[str] = set()
        self._pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(namesrv, topic, first)), daemon=True)
        self._thread.start()

    async def _run(self, namesrv: str, topic: str, first: int) -> None:
        async with Producer("stream_guarantees_trickle", namesrv_addr=namesrv) as producer:
            i = first
            while not self._stop.is_set():
                key = f"{topic}-{i}"
                msg = Message(topic, f"{key}:".encode() + PAD)
                msg.keys = key
                try:
                    await producer.send(msg)
                    self.acked.add(key)
                except LakeMQError:  # the broker restarting: that key's fate is unknown
                    self.failed.add(key)
                    await asyncio.sleep(0.2)
                i += 1
                await asyncio.sleep(self._pause)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the producer did not stop"


def _start(spark: Any, guarded: Guarded, topic: str, **options: str) -> Any:
    """A running query (a micro-batch every 500 ms) of ``topic`` into the Delta sink ``topic``,
    returned once its first micro-batch is done.

    Spark waits a fixed 10 s for the Python process that plans a Python source's batches to
    connect back; on a machine at load 25-30 (this one, shared) it sometimes takes longer and
    the query fails before its first batch. That start (and only that) is made again, from
    the checkpoint, as a user would restart it: at most six times."""
    reader = (spark.readStream.format("lakemq").option("namesrv", guarded.namesrv)
              .option("lake", str(guarded.lake)).option("topic", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    for attempt in range(6):
        query = (reader.load().select("keys", "queue_id", "queue_offset").writeStream.format("delta")
                 .option("checkpointLocation", str(guarded.root / "checkpoints" / topic))
                 .trigger(processingTime="500 milliseconds").start(str(guarded.root / "sinks" / topic)))
        deadline = time.monotonic() + 300
        while query.lastProgress is None and query.exception() is None:
            assert time.monotonic() < deadline, "the query's first micro-batch took over 300 s"
            time.sleep(0.2)
        failed = query.exception()
        if failed is None:
            return query
        assert "failed to connect back" in str(failed) and attempt < 5, failed
    raise AssertionError("unreachable")


def _caught_up(query: Any) -> None:
    """Wait until the query has processed everything its source offers now; it must not fail."""
    query.processAllAvailable()
    assert query.exception() is None, query.exception()


def _acknowledged(trickle: Trickle, count: int) -> None:
    """Wait until ``trickle`` has ``count`` acknowledged sends."""
    deadline = time.monotonic() + 120
    while len(trickle.acked) < count:
        assert time.monotonic() < deadline, f"the producer got {len(trickle.acked)} of {count} acknowledgements"
        time.sleep(0.2)


def _batches(query: Any) -> list[dict[str, Any]]:
    """The query's recent progress reports of micro-batches that read rows."""
    return [r for r in (json.loads(p.json) for p in query.recentProgress) if r["numInputRows"]]


def _sink(spark: Any, guarded: Guarded, topic: str) -> list[Any]:
    return spark.read.format("delta").load(str(guarded.root / "sinks" / topic)).collect()


def _assert_once(rows: list[Any], acked: set[str], maybe: AbstractSet[str] = frozenset()) -> None:
    keys = [r["keys"] for r in rows]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} message(s) twice in the sink"
    assert not acked - set(keys), f"missing from the sink: {sorted(acked - set(keys))[:10]}"
    assert set(keys) <= acked | maybe, f"never sent: {sorted(set(keys) - acked - maybe)[:10]}"
    assert len({(r["queue_id"], r["queue_offset"]) for r in rows}) == len(rows)


def _cold_reads(guarded: Guarded, topic: str) -> float:
    """The broker's lakemq_broker_cold_reads_total for ``topic`` (0 before its first)."""
    boot = (guarded.root / BROKER / f"{BROKER}.out").read_text()
    url = re.findall(r"metrics (http://\S+)", boot)
    assert url, boot
    scraped = urllib.request.urlopen(url[-1], timeout=10).read().decode()
    found = re.search(rf'lakemq_broker_cold_reads_total\{{[^}}]*topic="{topic}"[^}}]*\}} (\S+)', scraped)
    return float(found.group(1)) if found else 0.0


async def _min_offsets(namesrv: str, topic: str) -> list[int]:
    async with PullConsumer("stream_guarantees_min", namesrv_addr=namesrv) as consumer:
        return [await consumer.min_offset(mq) for mq in await _queues(namesrv, topic)]


def _tier(spark: Any, guarded: Guarded) -> None:
    # --no-retention: the running broker's guarded expiry deletes what the lake took.
    done = tier_run_in_process(spark, guarded.root, guarded.store, guarded.lake, BROKER, "--no-retention",
                               broker_conf=cold_read_broker_conf(guarded.lake))
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.timeout(900)  # with the module's cluster start: minutes at load 25-30
def test_earliest_after_retention_deleted_the_hot_files_reads_history_from_the_lake(
        spark: Any, guarded: Guarded) -> None:
    topic = "retained_orders"
    asyncio.run(_create(guarded.namesrv, topic, 2))
    acked = asyncio.run(_send(guarded.namesrv, topic, 0, 300))
    first_file = commitlog_files(guarded.store)[0].start
    _tier(spark, guarded)
    deadline = time.monotonic() + 60
    while commitlog_files(guarded.store)[0].start == first_file or \
            min(asyncio.run(_min_offsets(guarded.namesrv, topic))) == 0:
        assert time.monotonic() < deadline, "the broker never deleted the tiered files"
        time.sleep(0.3)
    acked |= asyncio.run(_send(guarded.namesrv, topic, 300, 40))  # a hot tail past the lake
    cold_before = _cold_reads(guarded, topic)

    query = _start(spark, guarded, topic)  # startingOffsets: earliest
    try:
        _caught_up(query)
    finally:
        query.stop()
    _assert_once(_sink(spark, guarded, topic), acked)
    # Every queue's start is gone from the broker; the stream asked it nothing below the lake's end.
    assert _cold_reads(guarded, topic) == cold_before


@pytest.mark.timeout(900)  # with the module's cluster start: minutes at load 25-30
def test_switch_while_a_tier_run_commits_the_range_being_read(spark: Any, guarded: Guarded) -> None:
    from deltalake import DeltaTable

    topic = "racing_orders"
    asyncio.run(_create(guarded.namesrv, topic, 4))
    acked = asyncio.run(_send(guarded.namesrv, topic, 0, 120))
    _tier(spark, guarded)
    acked |= asyncio.run(_send(guarded.namesrv, topic, 120, 240))  # only on the broker
    table = DeltaTable(str(guarded.lake / "messages"))
    before = table.version()

    # Small micro-batches: the stream is crossing the switch, batch by batch, when the commit lands.
    query = _start(spark, guarded, topic, maxOffsetsPerTrigger="24")
    # About ten sends a second: fewer than the stream reads, so it stays at the hot end the
    # commit takes in. (Every message sent while the tier run ran is a row the stream must
    # then read 24 at a time, a Delta commit of the sink each: at some 40 a second that
    # catching up cost a third of this test's time: 120 s, now 80 s.)
    trickle = Trickle(guarded.namesrv, topic, 10_000, pause=0.1)
    try:
        assert _batches(query), "the first micro-batch read nothing"
        result: dict[str, Any] = {}
        # tier run's pass on this session, committing everything the broker has flushed: the
        # range the stream is reading, lake and hot, while it reads.
        tier = threading.Thread(target=lambda: result.update(done=tier_run(
            spark, store_dir=guarded.store, broker_name=BROKER, upkeep=False, flushed=True,
            config=TieringConfig(lake_uri=str(guarded.lake), tier_seal_idle_ms=1))))
        tier.start()
        tier.join(300)
        assert not tier.is_alive() and result["done"].compact.committed, result
        # A few sends acknowledged after the commit: the stream has rows to read past it.
        after_commit, deadline = len(trickle.acked) + 5, time.monotonic() + 60
        while len(trickle.acked) < after_commit:
            assert time.monotonic() < deadline, "the producer got no acknowledgement after the tier run"
            time.sleep(0.1)
        trickle.stop()
        _caught_up(query)
        batches = _batches(query)
    finally:
        trickle.stop()
        query.stop()
    acked |= trickle.acked
    _assert_once(_sink(spark, guarded, topic), acked, trickle.failed)
    table.update_incremental()
    commits = [c for c in table.history() if int(c["version"]) > before]
    assert commits, "the tier run committed nothing"
    committed_ms = max(int(c["timestamp"]) for c in commits)
    started = [datetime.fromisoformat(p["timestamp"]).timestamp() * 1000 for p in batches]
    # Micro-batches were planned before the commit and after it: the switch moved under the stream.
    assert min(started) < min(int(c["timestamp"]) for c in commits), started
    assert max(started) > committed_ms, (committed_ms, started)


@pytest.mark.timeout(900)  # with the module's cluster start: minutes at load 25-30
def test_new_queues_of_a_scaled_up_topic_are_read(spark: Any, guarded: Guarded) -> None:
    topic = "growing_orders"
    asyncio.run(_create(guarded.namesrv, topic, 2))
    acked = asyncio.run(_send(guarded.namesrv, topic, 0, 40))
    query = _start(spark, guarded, topic)
    try:
        _caught_up(query)
        asyncio.run(_create(guarded.namesrv, topic, 4))  # updateTopic: 2 -> 4 queues, the query running
        for queue in (2, 3):
            acked |= asyncio.run(_send(guarded.namesrv, topic, 100 * queue, 15, queue))
        acked |= asyncio.run(_send(guarded.namesrv, topic, 1000, 20))
        _caught_up(query)
    finally:
        query.stop()
    rows = _sink(spark, guarded, topic)
    _assert_once(rows, acked)
    assert {r["queue_id"] for r in rows} == {0, 1, 2, 3}
    assert sorted(r["queue_offset"] for r in rows if r["queue_id"] == 3)[:15] == list(range(15))


@pytest.mark.timeout(900)  # with the module's cluster start: minutes at load 25-30
def test_a_broker_restart_while_the_query_runs_is_waited_out(spark: Any, guarded: Guarded) -> None:
    """Stop the broker (SIGTERM) and start it on its store while a producer sends and the query
    runs: the query goes on (brokerWaitMs), and the sink holds every acknowledged message once."""
    topic = "restarted_orders"
    asyncio.run(_create(guarded.namesrv, topic, 4))
    acked = asyncio.run(_send(guarded.namesrv, topic, 0, 60))
    _tier(spark, guarded)  # the lake names the broker for this topic: while it is away it is missed
    query = _start(spark, guarded, topic)
    _caught_up(query)  # the 60 (processAllAvailable never returns while a producer keeps sending)
    batches = len(query.recentProgress)
    trickle = Trickle(guarded.namesrv, topic, 10_000)
    try:
        _acknowledged(trickle, 30)
        guarded.cluster.restart_broker(BROKER)
        _acknowledged(trickle, len(trickle.acked) + 30)  # sends acknowledged by the restarted broker
        trickle.stop()
        _caught_up(query)
        assert query.isActive and len(query.recentProgress) > batches
    finally:
        trickle.stop()
        query.stop()
    acked |= trickle.acked
    assert trickle.acked, "no send was acknowledged"
    _assert_once(_sink(spark, guarded, topic), acked, trickle.failed)


def test_an_outage_longer_than_broker_wait_ms_fails_with_one_line(tmp_path: Path) -> None:
    """Past brokerWaitMs the planning's LakeError stands (the query fails, to be restarted from
    its checkpoint); 0 fails at once. No name server listens on port 1."""
    from lakemq.errors import ConfigError, LakeError
    from lakemq.jobs.live_stream import LiveStreamReader

    options = {"namesrv": "127.0.0.1:1", "lake": str(tmp_path / "lake"), "topic": "t"}
    for wait_ms, least_s in (("0", 0.0), ("1500", 1.5)):
        began = time.monotonic()
        with pytest.raises(LakeError, match="name server 127.0.0.1:1 is unreachable"):
            LiveStreamReader({**options, "brokerWaitMs": wait_ms}).initialOffset()
        assert least_s <= time.monotonic() - began < least_s + 30
    with pytest.raises(ConfigError, match="brokerWaitMs"):
        LiveStreamReader({**options, "brokerWaitMs": "soon"})
