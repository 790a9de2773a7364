"""A run's kept handle on a Delta table (lakemq.tiering.table_handles): loaded once, and at
every use at the table's newest version, whether the commit since came through the handle
itself (which deltalake does not follow) or from another writer."""

from __future__ import annotations

import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import Schema, write_deltalake
from deltalake.transaction import AddAction, CommitProperties, Transaction

from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.table_handles import TableHandles

SCHEMA = pa.schema([("n", pa.int64())])


def test_a_handle_is_loaded_once_and_always_at_the_newest_version(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lake = LakeLocation.of(str(tmp_path / "lake"))
    write_deltalake(lake.table_uri("t"), pa.table({"n": [0]}, schema=SCHEMA))
    loads: list[str] = []
    real = deltalake.DeltaTable
    monkeypatch.setattr(deltalake, "DeltaTable", lambda uri, **kw: loads.append(uri) or real(uri, **kw))
    handles = TableHandles(lake)
    table = handles.fresh("t")
    assert table.version() == 0
    # A commit through the handle: deltalake leaves the handle at the version it read.
    (tmp_path / "lake" / "t" / "part.parquet").write_bytes(b"")
    table.create_write_transaction(
        [AddAction(path="part.parquet", size=0, partition_values={}, modification_time=int(time.time() * 1000),
                   data_change=True, stats="{}")],
        mode="append", schema=Schema.from_arrow(SCHEMA),
        commit_properties=CommitProperties(app_transactions=[Transaction("broker-a", 100, 0)]))
    assert table.transaction_version("broker-a") is None
    again = handles.fresh("t")
    assert again is table and again.version() == 1 and again.transaction_version("broker-a") == 100
    # A commit by another writer (a concurrent run).
    write_deltalake(lake.table_uri("t"), pa.table({"n": [2]}, schema=SCHEMA), mode="append")
    assert handles.fresh("t").version() == 2
    assert loads == [lake.table_uri("t")]
