"""Power cuts during tier runs: a store and its local lake on one lazyfs mount, ``lakemq tier
run`` killed at stages of its pass (LAKEMQ_FAULT_STAGE) and the power cut right after, one cut
in two keeping every create, rename and unlink while dropping un-synced data; then a clean
run, and a cut after it too. With LAKEMQ_LONG=1 (tests/long_runs.py) it is killed at every
stage (before-write, before-commit, before-messages-commit, before-manifest,
during-retention); by default at before-write and before-manifest (tests/faults/test_tier_crash.py
kills it at the other three), the clean run's cut then keeping every unlink of its retention.

After each cut, once a commit the cut left torn at a log's end is set aside (what the next
tier run does first): the lake matches its manifest (every commit the manifest names is in
the Delta log, every file the log names reads back), and every message is in the hot tier or
in the lake, never in neither: retention's deletes may reach the disk only after what the lake holds
did. At the end every message is in the lake exactly once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakemq.common.faults import STAGES
from lakemq.tiering.delta_log import repair_torn_log
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.seal import commitlog_files
from lakemq.tiering.tables import KEYS_TABLE, MESSAGES_TABLE
from tests.cluster import tier_run_process
from tests.long_runs import sized
from tests.powercut.mount import LazyMount, fuse_available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from lake_helpers import FILE_SIZE, store_writer, user_messages

_WHY = fuse_available()
# Spark runs in a child process (the lake jobs), six times.
pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(_WHY is not None, reason=f"lazyfs needs FUSE: {_WHY}")]

BROKER = "broker-a"
# The seal's files cut before any write; a Delta commit the manifest does not name yet.
KILLED = sized(STAGES, ("before-write", "before-manifest"))




def _tier_run(root: Path, store: Path, lake: Path, stage: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "LAKEMQ_FAULT_STAGE"}
    if stage:
        env["LAKEMQ_FAULT_STAGE"] = stage
    done = tier_run_process(root, store, lake, BROKER, env=env,
                            broker_conf={"lakeUri": str(lake), "fileReservedTime": "0"})
    assert done.returncode == (-9 if stage else 0), (stage, done.returncode, done.stderr[-2000:])
    return done.returncode


def _lake_offsets(lake: Path) -> list[int]:
    from deltalake import DeltaTable

    if not (lake / "messages" / "_delta_log").exists():
        return []
    offsets: list[int] = []
    for uri in DeltaTable(str(lake / "messages")).file_uris():
        offsets += pq.read_table(uri, columns=["commitlog_offset"]).column(0).to_pylist()
    return sorted(offsets)


def _check(store: Path, lake: Path, offsets: list[int], when: str) -> list[str]:
    """The lake as the next tier run finds it, after it set aside a commit the cut left torn
    at the log's end (returned)."""
    from deltalake import DeltaTable

    location = LakeLocation.of(str(lake))
    torn = [name for table in (MESSAGES_TABLE, KEYS_TABLE) for name in repair_torn_log(location, table)]
    manifest = Manifest.load(location, BROKER)
    if manifest is not None and manifest.entries:
        version = DeltaTable(str(lake / "messages")).version()
        late = [e.delta_version for e in manifest.entries if e.delta_version > version]
        assert not late, f"{when}: the manifest names Delta versions {late} past the log's {version}"
    in_lake = set(_lake_offsets(lake))  # every file the log names reads back
    local = [(f.start, f.start + FILE_SIZE) for f in commitlog_files(store)]
    nowhere = [o for o in offsets if o not in in_lake and not any(a <= o < b for a, b in local)]
    assert not nowhere, f"{when}: {len(nowhere)} messages neither in the hot tier nor in the lake, first at {nowhere[0]}"
    return torn


@pytest.mark.timeout(1200)  # up to seven Spark runs of a minute or two each on a busy machine
def test_power_cuts_during_tier_runs_lose_nothing(lazy: LazyMount, tmp_path: Path) -> None:
    store, lake = lazy.mountpoint / "store", lazy.mountpoint / "lake"
    offsets = store_writer(store)(user_messages(1500))
    files_before = len(commitlog_files(store))
    for i, stage in enumerate([*KILLED, None]):
        _tier_run(tmp_path, store, lake, stage)
        counts = lazy.power_cut(keep_names=i % 2 == 0)
        lazy.mount()
        torn = _check(store, lake, offsets, f"cut after {stage or 'a clean run'} ({counts['pending_files']} files pending)")
        print(f"cut after {stage or 'a clean run'}: {counts['pending_files']} files pending, torn commits set aside: {torn}")
    _tier_run(tmp_path, store, lake, None)
    assert _lake_offsets(lake) == offsets, "not every message is in the lake exactly once"
    assert len(commitlog_files(store)) < files_before, "retention deleted nothing: the cuts did not test it"
