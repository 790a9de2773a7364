"""The tiering job killed at its stages, one kill after another on the same store and lake,
then run once more: the lake ends as after one clean run (every row once), the manifest agrees
with the Delta log, and no local CommitLog file goes before the lake holds it verified.

Each kill meets the leftovers of the ones before it (files written but not committed, a
commit the manifest does not know), as a job dying repeatedly in production would; after each
one the lake holds no row twice and no file went unverified. The job is ``lakemq tier run``
in a subprocess; ``LAKEMQ_FAULT_STAGE`` (lakemq.common.faults) makes it SIGKILL itself at the
named stage.

With LAKEMQ_LONG=1 (tests/long_runs.py) it is killed at every stage; by default at three of
them, and tests/powercut/test_tier_power_cut.py kills it at the other two, so that a default
run still kills the job at each stage once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakemq.common.faults import STAGES
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.seal import commitlog_files
from tests.cluster import tier_run_process
from tests.long_runs import sized

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lake"))
from lake_helpers import FILE_SIZE, store_writer, user_messages

# Spark runs in a child process (the lake jobs).
pytestmark = pytest.mark.spark

BROKER = "broker-a"
# Files written and not committed; the keys table committed and not the messages table; a
# retention pass cut short after the lake holds everything.
KILLED = sized(STAGES, ("before-commit", "before-messages-commit", "during-retention"))


def _tier_run(root: Path, store: Path, lake: Path, stage: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LAKEMQ_FAULT_STAGE"}
    if stage:
        env["LAKEMQ_FAULT_STAGE"] = stage
    # The broker reads this lake and keeps no file longer than needed: retention runs.
    return tier_run_process(root, store, lake, BROKER, env=env,
                            broker_conf={"lakeUri": str(lake), "fileReservedTime": "0"})


def _lake_offsets(lake: Path) -> list[int]:
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "messages"))
    offsets: list[int] = []
    for uri in table.file_uris():
        offsets += pq.read_table(uri, columns=["commitlog_offset"]).column(0).to_pylist()
    return sorted(offsets)


def _lake_keys(lake: Path) -> list[tuple[str, str, int]]:
    """(key, key type, offset) of every ``message_keys`` row."""
    from deltalake import DeltaTable

    rows: list[tuple[str, str, int]] = []
    for uri in DeltaTable(str(lake / "message_keys")).file_uris():
        table = pq.read_table(uri, columns=["key", "key_type", "commitlog_offset"])
        rows += zip(*(table.column(i).to_pylist() for i in range(3)), strict=True)
    return rows


def _check_no_loss(store: Path, lake: Path, files_before: list[Path]) -> int:
    """No row twice in the lake, no key twice in its index; every local file gone was
    committed and verified first. Returns how many local files are gone."""
    manifest = Manifest.load(LakeLocation.of(str(lake)), BROKER)
    verified_end = manifest.verified_end if manifest else 0
    gone = set(files_before) - {f.path for f in commitlog_files(store)}
    for path in gone:
        assert int(path.name) + FILE_SIZE <= verified_end, f"{path.name} deleted before it was verified"
    if (lake / "messages" / "_delta_log").exists():
        in_lake = _lake_offsets(lake)
        assert len(in_lake) == len(set(in_lake)), "a row is in the lake twice after the kill"
    if (lake / "message_keys" / "_delta_log").exists():
        keys = _lake_keys(lake)
        assert len(keys) == len(set(keys)), "a key is in the index twice after the kill"
    return len(gone)


@pytest.mark.slow
def test_kills_at_stages_then_a_rerun_converge_to_exactly_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    offsets = store_writer(store)(user_messages(1500))
    files_before = [f.path for f in commitlog_files(store)]
    lake = tmp_path / "lake"

    after_kill: list[str] = []
    for stage in KILLED:
        killed = _tier_run(tmp_path, store, lake, stage)
        assert killed.returncode == -9, (stage, killed.returncode, killed.stderr[-2000:])
        rows = len(_lake_offsets(lake)) if (lake / "messages" / "_delta_log").exists() else 0
        after_kill.append(f"{stage}: {rows} rows, {_check_no_loss(store, lake, files_before)} files gone")

    again = _tier_run(tmp_path, store, lake, None)
    assert again.returncode == 0, again.stderr[-2000:]
    assert _lake_offsets(lake) == offsets
    # Every message indexed once by each of its keys (order-<n> and k<n % 10>) and its unique key.
    assert sorted(offset for _, _, offset in _lake_keys(lake)) == sorted(offsets * 3)
    manifest = Manifest.load(LakeLocation.of(str(lake)), BROKER)
    assert manifest is not None and manifest.committed_end == manifest.verified_end
    from deltalake import DeltaTable

    assert DeltaTable(str(lake / "messages")).transaction_version(BROKER) == manifest.committed_end
    _check_no_loss(store, lake, files_before)
    left = commitlog_files(store)
    assert left and all(f.start >= manifest.verified_end or f.path == left[-1].path for f in left)
    print(f"injected: SIGKILL at {len(KILLED)} of {len(STAGES)} stages in turn ({'; '.join(after_kill)}); "
          f"measured after the re-run: {len(offsets)} rows once each, {len(files_before) - len(left)} of {len(files_before)} local files "
          f"deleted, all verified first")
