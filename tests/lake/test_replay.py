"""Replay from the lake through a real broker: what comes out equals what went in (compressed
bodies too), and a run killed mid-way (SIGKILL, or dead between a send and its checkpoint)
resumes without duplicates or gaps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from lake_helpers import WriteStore, read_all, user_messages

from lakemq.client import Message, SyncProducer
from lakemq.errors import ConfigError
from lakemq.jobs.broker_lookup import broker_lookup
from lakemq.jobs.compact import compact
from lakemq.jobs.ordered_scan import ordered_pages
from lakemq.jobs.replay import Ledger, merge_ranges, replay
from lakemq.jobs.tier_run import tier_run
from lakemq.tiering.config import TieringConfig
from tests.cli_in_process import lakemq_in_process
from tests.cluster import lakemq_command, start_cluster

SOURCE, TARGET, TARGET2 = "ReplaySource", "ReplayTarget", "ReplayTarget2"
COUNT = 300


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_replay_into_another_topic_resumes_after_a_kill(spark: Any, tmp_path: Path) -> None:
    with start_cluster(
        tmp_path / "cluster", broker_conf={"mappedFileSizeCommitLog": str(64 << 10)}
    ) as cluster:
        ns = cluster.namesrv_addr
        with SyncProducer("ReplayProducer", namesrv_addr=ns) as producer:
            producer.create_topic(SOURCE, 2)
            producer.create_topic(TARGET, 2)
            producer.create_topic(TARGET2, 2)
            began = int(time.time() * 1000)
            for i in range(COUNT):
                size = 500 if i % 50 == 0 else 10  # some bodies over 4 KiB: stored compressed
                msg = Message(
                    SOURCE, f"payload-{i}".encode() * size, properties={"color": ("red", "blue")[i % 2]}
                )
                msg.keys, msg.tags = [f"k{i}"], f"tag{i % 3}"
                producer.send(msg)
            ended = int(time.time() * 1000)
        originals = {m.msg_id: m for m in read_all(ns, SOURCE)}
        lake = tmp_path / "lake"
        tier_run(
            spark,
            store_dir=tmp_path / "cluster" / "broker-a" / "store",
            broker_name="broker-a",
            config=TieringConfig(lake_uri=str(lake), tier_seal_idle_ms=1),
            upkeep=False,
        )

        checkpoint = tmp_path / "replay.json"
        command = [
            "replay",
            "-n",
            ns,
            "--topic",
            SOURCE,
            "--target-topic",
            TARGET,
            "--from",
            str(began),
            "--to",
            str(ended),
            "--lake",
            str(lake),
            "--checkpoint",
            str(checkpoint),
            "--rate",
            "150",
            "--batch",
            "32",
            "--master",
            "local[1]",
        ]
        env = dict(os.environ, LAKEMQ_LOG_DIR=str(tmp_path / "logs"))
        first = subprocess.Popen(lakemq_command(*command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env)
        deadline = time.monotonic() + 300  # a loaded machine starts Spark slowly
        while (
            time.monotonic() < deadline
            and first.poll() is None
            and (not checkpoint.exists() or not _acknowledged(checkpoint))
        ):
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        _, first_err = first.communicate()
        partial = len(read_all(ns, TARGET))
        assert 0 < partial < COUNT, f"the kill should land mid-replay ({partial} of {COUNT}): {first_err[-3000:]}"

        # The resume and the run after it are the command's work, not its process: they run in
        # this process on the test's session (tests/cli_in_process.py), not two more drivers.
        in_process_env = {"LAKEMQ_LOG_DIR": str(tmp_path / "logs")}
        second = lakemq_in_process(spark, *command, env=in_process_env)
        assert second.returncode == 0, second.stderr[-2000:]
        # Again with a slightly different window (the ledger is per target, not per window):
        # nothing is sent twice.
        narrower = [str(ended - 1) if a == str(ended) else a for a in command]
        third = lakemq_in_process(spark, *narrower, env=in_process_env)
        assert third.returncode == 0, third.stderr[-2000:]
        assert third.stdout.startswith(f"replayed 0 message(s) to {TARGET}"), third.stdout
        copies = read_all(ns, TARGET)
        in_flight = _died_after_a_send_then_rerun(spark, ns, lake, began, ended, tmp_path / "replay2.json")
    print(
        f"injected: SIGKILL of the replay after {partial} of {COUNT}; measured: {len(copies)} in the target"
    )
    origin_ids = [m.properties["ORIGIN_MESSAGE_ID"] for m in copies]
    assert sorted(origin_ids) == sorted(originals), "replay lost or duplicated a message"
    for copy in copies:
        source = originals[copy.properties["ORIGIN_MESSAGE_ID"]]
        assert (copy.body, copy.tags, copy.keys, copy.properties["color"]) == (
            source.body,
            source.tags,
            source.keys,
            source.properties["color"],
        )
        assert copy.unique_key != source.unique_key  # a new message, not a resend of the old id
        assert copy.queue_id == source.queue_id  # as many queues in the target: the source's queue
    assert sorted(m.properties["ORIGIN_MESSAGE_ID"] for m in in_flight) == sorted(originals)


def _died_after_a_send_then_rerun(spark: Any, ns: str, lake: Path, began: int, ended: int, checkpoint: Path) -> list[Any]:
    """A run that dies after the broker stored a batch but before the checkpoint says so: the
    re-run finds that batch at the broker and sends only the rest."""
    with SyncProducer("ReplayInProcess", namesrv_addr=ns) as producer, broker_lookup(ns) as found:
        calls = 0

        def dies_after_second_send(msgs: Any, queue: int) -> None:
            nonlocal calls
            producer.send_batch(msgs)
            calls += 1
            if calls == 4:  # each batch goes as one send per source queue (2)
                raise KeyboardInterrupt("killed between the send and the checkpoint")

        common = {
            "lake_uri": str(lake),
            "topic": SOURCE,
            "begin_ms": began,
            "end_ms": ended,
            "checkpoint": checkpoint,
            "target_topic": TARGET2,
            "batch": 50,
            "found_at_broker": found,
        }
        try:
            replay(spark, send_batch=dies_after_second_send, **common)
        except KeyboardInterrupt:
            pass
        assert json.loads(checkpoint.read_text())["sending"], "the checkpoint should show a batch in flight"
        result = replay(spark, send_batch=lambda msgs, queue: producer.send_batch(msgs), **common)
    assert (result.skipped, result.recovered, result.sent) == (50, 50, COUNT - 100)
    return read_all(ns, TARGET2)


def _acknowledged(ledger: Path) -> bool:
    """Whether the ledger records a batch acknowledged (a range ending at a real row)."""
    return any(high[1] >= 0 for _, high in json.loads(ledger.read_text())["replayed"])


def test_ledger_ranges_merge_hold_and_survive_a_reload(tmp_path: Path) -> None:
    assert merge_ranges([((5, 0), (9, 9)), ((1, -1), (3, 7)), ((3, 7), (6, 1)), ((20, 0), (30, 0))]) == [
        ((1, -1), (9, 9)), ((20, 0), (30, 0))]
    ledger = Ledger().with_range(((100, -1), (200, 2**63 - 1))).with_range(((150, -1), (180, 5)), ((180, 5), (190, 0)))
    assert ledger.replayed == (((100, -1), (200, 2**63 - 1)),)
    assert ledger.holds((100, 0)) and ledger.holds((200, 10**12)) and not ledger.holds((201, 0))
    assert ledger.resume_after((150, -1)) == (200, 2**63 - 1) and ledger.resume_after((250, -1)) == (-1, -1)
    path = tmp_path / "ledger.json"
    ledger.save(path)
    assert Ledger.load(path) == ledger and Ledger.load(tmp_path / "none.json") == Ledger()
    path.write_text("{}")
    with pytest.raises(ConfigError, match="unreadable"):
        Ledger.load(path)


def test_ordered_scan_pages_every_row_once_in_order(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    """Many files and pages: every row of the topic and time range once, in
    (store_timestamp, commitlog_offset) order; ``after`` resumes past a row."""
    msgs = user_messages(150, topic="ScanA") + user_messages(60, topic="ScanB")
    offsets = write_store(msgs, file_size=16 * 1024)
    lake = tmp_path / "lake"
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="broker-a", seal_idle_ms=0)
    wanted = sorted(o for o, m in zip(offsets, msgs) if m.topic == "ScanA")
    files = [f for f in DeltaTable(str(lake / "messages")).file_uris() if "/topic=ScanA/" in f]
    assert len(files) > 2, "the topic should span several files"

    total, left, pages = ordered_pages(spark, str(lake), topic="ScanA", begin_ms=0, end_ms=2**62, page_rows=37)
    rows = [
        (ts, off)
        for page in pages
        for ts, off in zip(
            page.column("store_timestamp").to_pylist(), page.column("commitlog_offset").to_pylist()
        )
    ]
    assert (total, left) == (150, 150)
    assert rows == sorted(rows) and sorted(off for _, off in rows) == wanted

    total, left, pages = ordered_pages(spark, str(lake), topic="ScanA", begin_ms=0, end_ms=2**62, after=rows[99])
    assert (total, left) == (150, 50)
    assert [off for page in pages for off in page.column("commitlog_offset").to_pylist()] == [
        o for _, o in rows[100:]
    ]
