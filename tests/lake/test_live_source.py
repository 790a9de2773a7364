"""The ``lakemq`` source end to end: a real NameServer and broker on loopback, part of a
topic tiered into a local lake by ``lakemq tier run``, the rest only on the broker. The union
returns each acknowledged message once; filters apply to both sides; ``lakemq sql`` reads it as
``messages``; a tier run committing while 50 queries run leaves every query the same cut; a
stopped broker fails a query with one line naming it, or, asked to, the lake answers alone.

One cluster for the module (its broker is stopped by the last test) and the worker's one
Spark session."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.jobs.sources import register_sources
from lakemq.jobs.tier_run import tier_run
from lakemq.tiering.config import TieringConfig
from tests.cli_in_process import lakemq_in_process, stderr_lines, tier_run_in_process
from tests.cluster import Cluster, start_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "live_orders"
TIERED, HOT = 300, 120


@dataclass
class Live:
    cluster: Cluster
    root: Path
    lake: Path
    store: Path
    sent: dict[str, str]  # key -> tag, every message acknowledged so far

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr


async def _produce(namesrv: str, first: int, count: int, *, create: bool = False) -> dict[str, str]:
    if create:
        await create_routed_topic(namesrv, TOPIC, queue_nums=4)
    sent: dict[str, str] = {}
    async with Producer("live_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            msg = Message(TOPIC, f"order-{i}".encode() * 20)
            msg.keys = f"key-{i}"
            msg.tags = "paid" if i % 3 == 0 else "new"
            await producer.send(msg)
            sent[f"key-{i}"] = msg.tags or ""
    return sent


@pytest.fixture(scope="module")
def live(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("live")
    lake = root / "lake"
    with start_cluster(root, brokers=(BROKER,)) as cluster:
        state = Live(cluster, root, lake, root / BROKER / "store", {})
        state.sent.update(asyncio.run(_produce(state.namesrv, 0, TIERED, create=True)))
        done = tier_run_in_process(spark, root, state.store, lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]
        state.sent.update(asyncio.run(_produce(state.namesrv, TIERED, HOT)))
        register_sources(spark)
        yield state


def _read(spark: Any, live: Live, **options: str) -> Any:
    reader = spark.read.format("lakemq").option("namesrv", live.namesrv).option("lake", str(live.lake))
    for key, value in {"topic": TOPIC, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _lake_rows(spark: Any, live: Live) -> int:
    return int(spark.read.format("delta").load(str(live.lake / "messages")).where(f"topic = '{TOPIC}'").count())


def test_union_returns_each_message_once(spark: Any, live: Live) -> None:
    lake_rows = _lake_rows(spark, live)
    assert 0 < lake_rows < len(live.sent)  # some messages only on the broker
    rows = _read(spark, live).select("keys", "tags", "queue_id", "queue_offset", "commitlog_offset").collect()
    assert len(rows) == len(live.sent)
    assert {r["keys"]: r["tags"] for r in rows} == live.sent
    assert len({(r["queue_id"], r["queue_offset"]) for r in rows}) == len(rows)
    per_queue: dict[int, list[int]] = {}
    for r in rows:
        per_queue.setdefault(r["queue_id"], []).append(r["queue_offset"])
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values()), per_queue

    # A DataFrame is one cut (planned once); a new load sees a message sent since.
    frame = _read(spark, live)
    before = frame.count()
    live.sent.update(asyncio.run(_produce(live.namesrv, 10_000, 5)))
    assert frame.count() == before
    assert _read(spark, live).count() == before + 5 == len(live.sent)


def test_filters_apply_to_lake_and_hot_rows(spark: Any, live: Live) -> None:
    paid = _read(spark, live).where("tags = 'paid'").select("keys").collect()
    assert sorted(r["keys"] for r in paid) == sorted(k for k, t in live.sent.items() if t == "paid")
    keyed = _read(spark, live).where("keys IN ('key-1', 'key-301', 'key-nope')").select("keys").collect()
    assert sorted(r["keys"] for r in keyed) == ["key-1", "key-301"]
    times = sorted(r["store_timestamp"] for r in _read(spark, live).select("store_timestamp").collect())
    low, high = times[len(times) // 4], times[3 * len(times) // 4]
    ranged = _read(spark, live).where(f"store_timestamp >= {low} AND store_timestamp < {high}").count()
    assert ranged == sum(1 for t in times if low <= t < high)
    plan = _read(spark, live).where("tags = 'paid'")._jdf.queryExecution().executedPlan().toString()
    assert "paid" not in plan.split("BatchScan")[0], plan  # taken by the source, not evaluated again by Spark


def test_a_given_schema_reads_only_its_columns_from_both_sides(spark: Any, live: Live) -> None:
    def load(schema: str) -> Any:
        return (spark.read.format("lakemq").schema(schema).option("namesrv", live.namesrv)
                .option("lake", str(live.lake)).option("topic", TOPIC).load())

    whole = {(r["keys"], r["queue_id"], r["queue_offset"], bytes(r["body"]))
             for r in _read(spark, live).select("keys", "queue_id", "queue_offset", "body").collect()}
    frame = load("keys string, queue_id int, queue_offset bigint, body binary")
    assert frame.columns == ["keys", "queue_id", "queue_offset", "body"]
    cut = frame.collect()
    assert len(cut) == len(whole) == len(live.sent)  # lake rows and pulled rows alike
    assert {(r["keys"], r["queue_id"], r["queue_offset"], bytes(r["body"])) for r in cut} == whole
    # Filters still apply to a column the schema names, on both sides.
    paid = load("tags string, keys string").where("tags = 'paid'").collect()
    assert sorted(r["keys"] for r in paid) == sorted(k for k, t in live.sent.items() if t == "paid")

    for schema, says in (("body binary, payload binary", "'payload', which is not a column of messages"),
                         ("queue_offset int", "gives 'queue_offset' the type int32; messages holds it as int64"),
                         ("keys string NOT NULL", "declares 'keys' NOT NULL"),
                         ("body binary, body binary", "names a column twice")):
        with pytest.raises(Exception, match=says):
            load(schema).collect()


def _count(output: str) -> int:
    numbers = [int(tok) for line in output.splitlines() for tok in line.replace("│", " ").split() if tok.isdigit()]
    assert numbers, output
    return numbers[0]


def test_sql_messages_is_the_union_and_messages_lake_the_table(spark: Any, live: Live) -> None:
    lake_rows = _lake_rows(spark, live)
    query = f"SELECT count(*) AS n FROM {{}} WHERE topic = '{TOPIC}'"
    common = ["sql", "-n", live.namesrv, "--lake", str(live.lake)]
    union = lakemq_in_process(spark, *common, query.format("messages"))
    assert union.returncode == 0, union.stderr
    assert _count(union.stdout) == len(live.sent)
    lake_only = lakemq_in_process(spark, *common, query.format("messages_lake"))
    assert _count(lake_only.stdout) == lake_rows
    flag = lakemq_in_process(spark, *common, "--lake-only", query.format("messages"))
    assert _count(flag.stdout) == lake_rows
    conf = live.root / "reader.conf"
    conf.write_text(f"namesrvAddr={live.namesrv}\nlakeUri={live.lake}\n")
    by_conf = lakemq_in_process(spark, "sql", "-c", str(conf), query.format("user_messages"))
    assert by_conf.returncode == 0, by_conf.stderr
    assert _count(by_conf.stdout) == len(live.sent)
    # Every topic the name server lists (system topics too) and every topic in the lake.
    everything = lakemq_in_process(spark, *common, "SELECT topic, count(*) AS n FROM messages GROUP BY topic")
    assert everything.returncode == 0, everything.stderr
    assert str(len(live.sent)) in everything.stdout and TOPIC in everything.stdout, everything.stdout

    # The registered view plans again at every query: a message sent since is in the next one.
    from lakemq.jobs.sql import register_live

    register_live(spark, str(live.lake), live.namesrv)
    first = spark.sql(query.format("messages")).collect()[0]["n"]
    live.sent.update(asyncio.run(_produce(live.namesrv, 20_000, 3)))
    assert spark.sql(query.format("user_messages")).collect()[0]["n"] == first + 3 == len(live.sent)


def _lake_version(live: Live) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(live.lake / "messages")).version())


@pytest.mark.timeout(600)  # 50 Spark queries on a shared 2-core machine, beside a tier run
def test_a_tier_run_racing_50_queries_leaves_each_one_cut(spark: Any, live: Live) -> None:
    from pyspark.sql import functions as F

    live.sent.update(asyncio.run(_produce(live.namesrv, 30_000, 200)))
    expected = len(live.sent)  # every message acknowledged before any query below is planned
    lake_before = _lake_rows(spark, live)
    assert lake_before < expected
    start = _lake_version(live)
    result: dict[str, Any] = {}
    config = TieringConfig(lake_uri=str(live.lake), tier_seal_idle_ms=1)
    # tier run's own pass on this session (a second driver JVM would starve on this machine).
    tier = threading.Thread(target=lambda: result.update(
        done=tier_run(spark, store_dir=live.store, broker_name=BROKER, config=config, upkeep=False)))
    tier.start()
    seen: list[tuple[int, int]] = []  # lake version before and after each query
    deadline = time.monotonic() + 600
    while len(seen) < 50 or tier.is_alive():
        assert time.monotonic() < deadline, f"{len(seen)} queries; the tier run still going"
        before = _lake_version(live)
        row = _read(spark, live).agg(F.count("*").alias("n"),
                                     F.countDistinct("queue_id", "queue_offset").alias("d")).collect()[0]
        assert (row["n"], row["d"]) == (expected, expected), (len(seen), before)
        seen.append((before, _lake_version(live)))
    tier.join()
    assert result["done"].compact.committed, result
    end = _lake_version(live)
    assert end > start and _lake_rows(spark, live) == expected
    # The commit landed while the queries ran: some planned before it, some after.
    assert any(b == start for b, _ in seen) and any(b == end for b, _ in seen), (start, end, seen)


def test_a_stopped_broker_fails_the_query_or_the_lake_answers_alone(spark: Any, live: Live) -> None:
    live.sent.update(asyncio.run(_produce(live.namesrv, 40_000, 30)))
    lake_rows = _lake_rows(spark, live)
    assert lake_rows <= len(live.sent) - 30
    assert live.cluster.stop_broker(BROKER) == 0

    with pytest.raises(Exception) as failed:
        _read(spark, live).count()
    assert f"broker {BROKER}" in str(failed.value) and "allowStaleHotTail" in str(failed.value)
    query = f"SELECT count(*) AS n FROM messages WHERE topic = '{TOPIC}'"
    refused = lakemq_in_process(spark, "sql", "-n", live.namesrv, "--lake", str(live.lake), query)
    assert refused.returncode != 0
    lines = stderr_lines(refused.stderr)
    assert len(lines) == 1, refused.stderr
    line = lines[0]
    assert f"broker {BROKER}" in line and "hot tail is unavailable" in line, refused.stderr

    assert _read(spark, live, allowStaleHotTail="true").count() == lake_rows
    stale = lakemq_in_process(spark, "sql", "-n", live.namesrv, "--lake", str(live.lake), "--allow-stale-hot-tail",
                              query)
    assert stale.returncode == 0, stale.stderr
    assert _count(stale.stdout) == lake_rows
    assert f"answered from the lake alone for broker {BROKER}" in stale.stderr and " s ago" in stale.stderr
