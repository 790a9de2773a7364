"""A Delta log that a power cut left torn at its end is repaired by setting the torn commits
aside (lakemq.tiering.delta_log); one torn before its end is refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakemq.errors import LakeError
from lakemq.tiering.delta_log import make_log_durable, repair_torn_log
from lakemq.tiering.lake_fs import LakeLocation


def _table(tmp_path: Path, commits: int) -> tuple[LakeLocation, Path]:
    lake = LakeLocation.of(str(tmp_path / "lake"))
    for i in range(commits):
        write_deltalake(lake.table_uri("t"), pa.table({"n": [i]}), mode="append")
        make_log_durable(lake, "t")
    return lake, tmp_path / "lake" / "t" / "_delta_log"


def test_a_torn_last_commit_is_set_aside_and_the_table_reads_again(tmp_path: Path) -> None:
    lake, log_dir = _table(tmp_path, 3)
    (log_dir / "00000000000000000002.json").write_bytes(b"")  # the name survived, the bytes did not
    (log_dir / "00000000000000000001.json").write_bytes(b'{"commitInfo":{}}\n{"add":{"pa')  # torn mid-line
    with pytest.raises(Exception, match="(?i)json|metadata|protocol|parse|invalid"):
        DeltaTable(lake.table_uri("t")).version()
    assert repair_torn_log(lake, "t") == ["00000000000000000002.json", "00000000000000000001.json"]
    table = DeltaTable(lake.table_uri("t"))
    assert table.version() == 0 and table.to_pyarrow_table().column("n").to_pylist() == [0]
    assert sorted(p.name for p in (tmp_path / "lake" / "_torn" / "t").iterdir()) == [
        "00000000000000000001.json", "00000000000000000002.json"]
    assert repair_torn_log(lake, "t") == []  # a sound log is left as it is


def test_a_torn_commit_before_the_end_is_damage_not_a_cut(tmp_path: Path) -> None:
    lake, log_dir = _table(tmp_path, 3)
    (log_dir / "00000000000000000001.json").write_bytes(b"")
    with pytest.raises(LakeError, match="00000000000000000001.json"):
        repair_torn_log(lake, "t")
    assert (log_dir / "00000000000000000001.json").exists()


def test_each_write_syncs_the_newest_checkpoint_not_every_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tier run commits ~100 ranges; fsyncing every checkpoint the log ever kept after each
    # commit made its cost grow with the table's age.
    lake = LakeLocation.of(str(tmp_path / "lake"))
    for i in range(7):
        write_deltalake(lake.table_uri("t"), pa.table({"n": [i]}), mode="append",
                        configuration={"delta.checkpointInterval": "2"})
    synced: list[str] = []
    monkeypatch.setattr(LakeLocation, "make_durable", lambda self, paths: synced.extend(paths))
    log_dir = tmp_path / "lake" / "t" / "_delta_log"
    every = sorted(p.name for p in log_dir.iterdir() if ".checkpoint" in p.name)
    assert len(every) >= 3, every
    make_log_durable(lake, "t")
    names = [Path(p).name for p in synced]
    assert [n for n in names if ".checkpoint" in n] == [every[-1]]
    assert "_last_checkpoint" in names and "00000000000000000006.json" in names
    synced.clear()
    make_log_durable(lake, "t", whole=True)  # a repair makes the whole log durable
    assert sorted(n for n in (Path(p).name for p in synced) if ".checkpoint" in n) == every
