"""Read-only views of the lake for the console: segments per broker, Delta history and
message search over the ``messages`` table, without Spark.

Blocking (deltalake/pyarrow/file IO); callers run these in a thread executor. The table is
read through the snapshot's add actions (path + partition values) and pyarrow datasets over
those files, not ``DeltaTable.to_pyarrow_table`` (see ARCHITECTURE.md's hazard note).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakemq.tiering.config import TieringConfig
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.seal import commitlog_files, load_seals
from lakemq.tiering.table_files import add_actions, table_dataset
from lakemq.tiering.tables import DATA_SCHEMA, LAKE_MESSAGE_COLUMNS, MESSAGES_TABLE, LakeMessage
from lakemq.tiering.tail import UntieredTail, untiered_tail

__all__ = [
    "BrokerTiering",
    "DeltaVersion",
    "SegmentRow",
    "broker_tiering",
    "delta_history",
    "search_lake",
]



@dataclass(frozen=True, slots=True)
class DeltaVersion:
    version: int
    timestamp_ms: int
    operation: str
    broker: str
    segment: str
    rows: int


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """One sealed CommitLog range and where it is: sealed (hot only), committed or verified."""
    segment: str
    range_start: int
    range_end: int
    rows: int
    state: str
    delta_version: int | None


@dataclass(frozen=True, slots=True)
class BrokerTiering:
    broker: str
    store_dir: str | None  # None when the store is not readable from the console's host
    hot_files: int
    segments: list[SegmentRow] = field(default_factory=list)
    committed_end: int = 0
    verified_end: int = 0
    lake_ranges: int = 0
    tail: UntieredTail | None = None  # the store past the lake's end (None: store not readable)

    def count(self, state: str) -> int:
        return sum(1 for s in self.segments if s.state == state)


def _table(lake: LakeLocation) -> DeltaTable | None:
    uri = lake.table_uri(MESSAGES_TABLE)
    if not lake.exists(lake.join(MESSAGES_TABLE, "_delta_log")):
        return None
    return DeltaTable(uri, storage_options=lake.delta_options())


def delta_history(lake: LakeLocation, limit: int = 200) -> list[DeltaVersion]:
    """The table's commits, newest first, with tiering's commit info (broker, segment, rows)."""
    table = _table(lake)
    if table is None:
        return []
    out = []
    for h in table.history(limit):
        out.append(DeltaVersion(int(h.get("version", 0)), int(h.get("timestamp", 0)), str(h.get("operation", "")),
                                str(h.get("lakemq.broker", "")), str(h.get("lakemq.segment", "")),
                                int(h.get("lakemq.rows", 0) or 0)))
    return sorted(out, key=lambda v: -v.version)


def broker_tiering(lake: LakeLocation, broker: str, store_dir: str | None) -> BrokerTiering:
    manifest = Manifest.load(lake, broker)
    entries = {e.range_start: e for e in (manifest.entries if manifest else [])}
    readable = store_dir is not None and Path(store_dir).is_dir()
    rows: list[SegmentRow] = []
    seen: set[int] = set()
    if readable:
        for seal in load_seals(store_dir or ""):
            entry = entries.get(seal.range_start)
            state = "sealed" if entry is None else ("verified" if entry.verified else "committed")
            rows.append(SegmentRow(seal.file_name, seal.range_start, seal.range_end, seal.rows, state,
                                   None if entry is None else entry.delta_version))
            seen.add(seal.range_start)
    for start, entry in sorted(entries.items()):
        if start not in seen:  # the local seal is gone: hot retention already deleted the file
            rows.append(SegmentRow(entry.segment, entry.range_start, entry.range_end, entry.rows,
                                   "in lake only", entry.delta_version))
    rows.sort(key=lambda r: r.range_start)
    committed_end = manifest.committed_end if manifest else 0
    # The console does not read the broker's conf; the tail's bytes and messages do not depend on it.
    tail = untiered_tail(store_dir or "", committed_end, idle_ms=TieringConfig().tier_seal_idle_ms) if readable else None
    return BrokerTiering(broker, store_dir if readable else None,
                         len(commitlog_files(store_dir or "")) if readable else 0, rows,
                         committed_end, manifest.verified_end if manifest else 0, len(entries), tail)


def search_lake(lake: LakeLocation, *, topic: str | None = None, key: str | None = None,
                msg_id: str | None = None, unique_key: str | None = None, begin_ms: int = 0,
                end_ms: int = 2**63 - 1, limit: int = 100, newest: bool = False) -> list[LakeMessage]:
    """Messages of the lake's ``messages`` table matching every given criterion, oldest first;
    with ``newest``, the newest ``limit`` of them, newest first."""
    actions = add_actions(lake, MESSAGES_TABLE)
    first_day = dt.datetime.fromtimestamp(max(begin_ms, 0) / 1000, dt.UTC).date()
    last_day = dt.datetime.fromtimestamp(min(end_ms, 253402214400000) / 1000, dt.UTC).date()

    def in_range(add: Mapping[str, Any]) -> bool:
        day = add["partition.store_date"]
        if isinstance(day, str):
            day = dt.date.fromisoformat(day)
        # store_date is the UTC day of store_timestamp: a file of another day holds none
        return (not topic or add["partition.topic"] == topic) and (day is None or first_day <= day <= last_day)

    topics = sorted({add["partition.topic"] for add in actions if in_range(add)})
    cond = (pc.field("store_timestamp") >= begin_ms) & (pc.field("store_timestamp") <= end_ms)
    if msg_id:
        cond &= pc.field("msg_id") == msg_id
    if unique_key:
        cond &= pc.field("uniq_key") == unique_key
    if key:
        cond &= pc.match_substring(pc.field("keys"), key)
    found: list[LakeMessage] = []
    for part_topic in topics:
        def of_topic(add: Mapping[str, Any], wanted: str = part_topic) -> bool:
            return add["partition.topic"] == wanted and in_range(add)

        data = table_dataset(lake, MESSAGES_TABLE, DATA_SCHEMA, of_topic, actions)
        if data is None:
            continue
        batch: pa.Table = data.to_table(columns=list(LAKE_MESSAGE_COLUMNS), filter=cond)
        for row in batch.to_pylist():
            message = LakeMessage.from_row(part_topic, row)
            if key and key not in message.keys:
                continue  # a substring of another key
            found.append(message)
    found.sort(key=lambda m: (m.store_timestamp, m.msg_id), reverse=newest)
    return found[:limit]
