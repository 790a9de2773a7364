"""A lake table's current data files as a pyarrow dataset, for reads without Spark.

Cold reads, the console and the look-up's index step read a few rows; a Spark job would cost
more than the read. The snapshot's add actions (deltalake) give each file's path, partition
values and statistics; ``keep`` picks the files by them (flattened as deltalake names them:
``partition.topic``, ``min.key``, ``max.commitlog_offset``), and pyarrow reads the files,
skipping row groups by their Parquet statistics. Not ``DeltaTable.to_pyarrow_dataset``:
with deltalake 1.6 a process that used it aborts at exit ("terminate called without an
active exception", exit status 134).
"""

from __future__ import annotations

import bisect
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem

from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["add_actions", "holds_offset", "snapshot_actions", "table_dataset"]

AddAction = Mapping[str, Any]


def add_actions(lake: LakeLocation, table: str) -> list[dict[str, Any]]:
    """The add actions of ``table``'s current snapshot, flattened; none when it does not exist."""
    from deltalake import DeltaTable

    if not lake.exists(lake.join(table, "_delta_log")):
        return []
    uri = lake.table_uri(table)
    with reading_table(lake, table):
        return snapshot_actions(DeltaTable(uri, storage_options=lake.delta_options()))


def snapshot_actions(handle: Any) -> list[dict[str, Any]]:
    """The add actions of a ``deltalake.DeltaTable``'s snapshot, flattened."""
    actions: list[dict[str, Any]] = pa.table(handle.get_add_actions(flatten=True)).to_pylist()
    return actions


def table_dataset(lake: LakeLocation, table: str, schema: pa.Schema, keep: Callable[[AddAction], bool],
                  actions: list[dict[str, Any]] | None = None) -> ds.Dataset | None:
    """The files of ``table`` that ``keep`` accepts (data columns only: ``schema`` leaves the
    partition columns out); None when the table or such files do not exist. ``actions``: the
    snapshot's add actions when the caller read them already (one log read for several sets)."""
    if actions is None:
        actions = add_actions(lake, table)
    uri = lake.table_uri(table)
    if lake.is_local:
        filesystem, root = None, uri
    else:
        filesystem, root = PyFileSystem(FSSpecHandler(lake.fs)), uri.split("://", 1)[1]
    # Add-action paths are URIs: escaped partition directories (%RETRY%, %DLQ%) are escaped again.
    files = [f"{root}/{urllib.parse.unquote(action['path'])}" for action in actions if keep(action)]
    if not files:
        return None
    return ds.dataset(files, schema=schema, format="parquet", filesystem=filesystem)


def holds_offset(action: AddAction, offsets: list[int]) -> bool:
    """Whether a ``messages`` file's CommitLog offset statistics hold one of ``offsets``
    (sorted); a file without them may."""
    low, high = action.get("min.commitlog_offset"), action.get("max.commitlog_offset")
    if low is None or high is None:
        return True
    i = bisect.bisect_left(offsets, low)
    return i < len(offsets) and offsets[i] <= high
