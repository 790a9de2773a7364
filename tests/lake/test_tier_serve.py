"""A fresher lake: a running broker with a trickle of messages and CommitLog files that never
fill or idle; ``tier serve`` (its pass, in this process, and the command, in its own) commits
what the broker has flushed without sealing a file, never twice, and after a kill -9 in the
middle of a commit the next pass leaves no row twice and none missing. Retention keeps the
file being written: the lake holds only part of it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from lake_helpers import wait_flushed

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.jobs.tier_serve import tier_serve
from lakemq.jobs.tier_warm import warm_up
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.retention import RetentionRules
from lakemq.tiering.seal import commitlog_files, load_seals
from tests.cli_in_process import tier_run_in_process
from tests.cluster import lakemq_command, start_cluster, write_tier_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "fresh_orders"


def _conf(lake: Path) -> dict[str, str]:
    # 1 MiB files, idle sealing after 10 minutes: only reading what is flushed tiers anything.
    return {"mappedFileSizeCommitLog": str(1 << 20), "lakeUri": str(lake), "fileReservedTime": "0",
            "tierSealIdleMs": "600000"}


async def _send(namesrv: str, start: int, count: int, create: bool = False) -> int:
    """Sends messages ``start .. start+count-1``; returns the CommitLog offset of the last."""
    if create:
        await create_routed_topic(namesrv, TOPIC, queue_nums=2)
    last = -1
    async with Producer("fresh_producer", namesrv_addr=namesrv) as producer:
        for i in range(start, start + count):
            result = await producer.send(Message(TOPIC, f"m-{i}:".encode() + b"x" * 300))
            last = int(result.offset_msg_id[-16:], 16)
    return last


def _lake_rows(lake: Path) -> list[tuple[int, int]]:
    """(queue id, queue offset) of every row of the test topic in the lake."""
    from deltalake import DeltaTable

    rows: list[tuple[int, int]] = []
    for uri in DeltaTable(str(lake / "messages")).file_uris():
        t = pq.read_table(uri, columns=["topic", "queue_id", "queue_offset"])
        rows += [(q, o) for topic, q, o in zip(*(t.column(i).to_pylist() for i in range(3)), strict=True)
                 if topic == TOPIC]
    return rows


def _assert_exactly(lake: Path, count: int) -> None:
    rows = _lake_rows(lake)
    assert len(rows) == len(set(rows)), "a message is in the lake twice"
    per_queue: dict[int, list[int]] = {}
    for q, o in rows:
        per_queue.setdefault(q, []).append(o)
    for q, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {q} has a gap"
    assert len(rows) == count


def _one_pass(spark: Any, store: Path, lake: Path, retention: RetentionRules | None = None) -> Any:
    config = TieringConfig(lake_uri=str(lake), tier_seal_idle_ms=600_000, tier_interval_ms=1)
    seen: list[Any] = []
    passes = tier_serve(spark, store_dir=store, broker_name=BROKER, config=config, stop=threading.Event(),
                        retention=retention, on_pass=seen.append, max_passes=1)
    assert passes == 1
    return seen[0]


def test_serve_commits_flushed_records_once_without_sealing(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=_conf(lake)) as cluster:
        store = tmp_path / BROKER / "store"
        last = asyncio.run(_send(cluster.namesrv_addr, 0, 40, create=True))
        wait_flushed(store, last)
        rules = RetentionRules.for_broker(_conf(lake), LakeLocation.of(str(lake)))
        first = _one_pass(spark, store, lake, rules)
        assert first.result.compact.rows == 40
        _assert_exactly(lake, 40)
        seals = load_seals(store)
        assert seals and not any(s.full for s in seals), "a range waited for a full file"
        assert seals[-1].range_end > last  # ends past the last record's start, on a record boundary

        # Nothing new: a pass commits nothing and the lake is unchanged.
        assert _one_pass(spark, store, lake, rules).result.compact.rows == 0
        _assert_exactly(lake, 40)

        # The trickle goes on: the next pass takes only what came since.
        last = asyncio.run(_send(cluster.namesrv_addr, 40, 25))
        wait_flushed(store, last)
        assert _one_pass(spark, store, lake, rules).result.compact.rows == 25
        _assert_exactly(lake, 65)
        # The file being written is only partly in the lake: retention keeps it.
        live = commitlog_files(store)[-1]
        assert live.start <= last < live.end and live.path.exists()

        # `tier run --flushed`, once: the same, from the command line (without --flushed it
        # would wait for the file to idle for tierSealIdleMs).
        last = asyncio.run(_send(cluster.namesrv_addr, 65, 10))
        wait_flushed(store, last)
        idle_conf = {"lakeUri": str(lake), "tierSealIdleMs": "600000"}
        done = tier_run_in_process(spark, tmp_path, store, lake, BROKER, "--no-retention", broker_conf=idle_conf)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "committed 0 range(s)" in done.stdout and "not yet in the lake" in done.stdout, done.stdout
        done = tier_run_in_process(spark, tmp_path, store, lake, BROKER, "--no-retention", "--flushed",
                                   broker_conf=idle_conf)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "committed 1 range(s), 10 rows" in done.stdout, done.stdout
        _assert_exactly(lake, 75)


def test_warm_up_is_a_whole_pass_on_scratch_and_leaves_nothing(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    warmed = warm_up(spark)
    slots = spark.sparkContext.defaultParallelism
    assert (warmed.rows, warmed.tasks) == (slots, slots)  # every scratch record written and committed
    assert not list(tmp_path.iterdir()), "the scratch store and lake were left behind"


def _serve_process(root: Path, store: Path, lake: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    conf = write_tier_conf(root, store, BROKER, {"lakeUri": str(lake), "tierSealIdleMs": "600000"})
    run_env = {**(env or os.environ), "LAKEMQ_LOG_DIR": str(root / "serve-logs")}
    return subprocess.Popen(
        lakemq_command("tier", "serve", "-c", str(conf), "--lake", str(lake), "--master", "local[1]",
                       "--interval-ms", "500", "--no-retention"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env)


@pytest.mark.timeout(900)  # two serve processes, each starting its own driver and warming it up
def test_serve_stops_on_sigterm_and_survives_kill_mid_commit(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=_conf(lake)) as cluster:
        store = tmp_path / BROKER / "store"
        last = asyncio.run(_send(cluster.namesrv_addr, 0, 30, create=True))
        wait_flushed(store, last)

        # A clean stop: SIGTERM after the first pass line, exit 0.
        proc = _serve_process(tmp_path, store, lake)
        assert proc.stdout is not None
        # Ready only after the warm-up pass (one scratch row per Spark core: local[1], one).
        ready = proc.stdout.readline()
        assert ready.startswith("tier serve ready: warmed up in "), (ready, proc.stderr.read() if proc.stderr else "")
        assert "a pass of 1 scratch row(s) in 1 Spark task(s)" in ready, ready
        line = proc.stdout.readline()
        assert " pass 1: committed 1 range(s), 30 rows" in line, (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert "stopped after" in out
        _assert_exactly(lake, 30)

        # Killed with SIGKILL between a Delta commit and the manifest's save, then a pass again
        # (in this process: the restart's code path, without a third driver start). The other stages
        # a pass can die at are tier run's: tests/faults/test_tier_crash.py.
        last = asyncio.run(_send(cluster.namesrv_addr, 30, 20))
        wait_flushed(store, last)
        env = {k: v for k, v in os.environ.items() if k != "LAKEMQ_FAULT_STAGE"}
        proc = _serve_process(tmp_path, store, lake, {**env, "LAKEMQ_FAULT_STAGE": "before-manifest"})
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, err[-3000:]
        assert _one_pass(spark, store, lake).result.compact.rows == 0  # the killed pass had committed it
        _assert_exactly(lake, 50)


def test_passes_run_in_the_tier_pool_and_leave_the_thread_as_it_was(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Under `tier serve`'s FAIR scheduling the lake service's queries get a core between a
    # pass's tasks only if the pass's jobs are in a pool of their own.
    import lakemq.jobs.tier_serve as serve_module

    pools: list[str | None] = []
    real = serve_module.tier_run

    def recording(session: Any, **kwargs: Any) -> Any:
        pools.append(session.sparkContext.getLocalProperty("spark.scheduler.pool"))
        return real(session, **kwargs)

    monkeypatch.setattr(serve_module, "tier_run", recording)
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    config = TieringConfig(lake_uri=str(tmp_path / "lake"), tier_seal_idle_ms=600_000, tier_interval_ms=1)
    assert tier_serve(spark, store_dir=store, broker_name=BROKER, config=config, stop=threading.Event(),
                      max_passes=2) == 2
    assert pools == [serve_module.TIER_POOL] * 2
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None
