"""``message_keys`` files: the keys of the messages one compaction task wrote, sorted by key.

The lake's IndexFile (see ``KEYS_TABLE`` in :mod:`lakemq.tiering.tables`). A task keeps the
key rows of each (segment range, topic) it decodes and writes them, sorted by key, as one
Parquet file with small row groups and a page index when the task ends: a look-up by key
then reads, in each file, only the row group and pages whose key range holds the key. Like
the message files, nothing is committed here; the driver commits a range's key files in the
``message_keys`` table just before its message files (:mod:`lakemq.jobs.compact`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.jobs.delta_stats import stats_json
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import (
    KEY_TYPE_KEY,
    KEY_TYPE_UNIQ,
    KEYS_DATA_SCHEMA,
    KEYS_TABLE,
    escape_partition_value,
)

__all__ = ["KEYS_PARQUET_OPTIONS", "KeysFile", "key_rows"]

# A look-up by key reads one row group per file it cannot skip; 64 Ki keys keeps that small.
_ROW_GROUP_ROWS = 64 * 1024
_STATS_COLUMNS = ("key", "commitlog_offset", "store_timestamp")
KEYS_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["key_type", "store_host"],
    "write_statistics": list(_STATS_COLUMNS),
    "write_page_index": True,
}


def key_rows(rows: pa.RecordBatch) -> pa.Table:
    """The index rows (KEYS_DATA_SCHEMA) of decoded ``messages`` rows: one per key of KEYS
    (space-separated, empty pieces left out) and one per UNIQ_KEY."""
    lists = pc.split_pattern(rows.column("keys"), " ")
    keys = pc.list_flatten(lists)
    present = pc.not_equal(keys, "")
    key_positions = pc.list_parent_indices(lists).filter(present)
    uniq = rows.column("uniq_key")
    uniq_positions = pc.indices_nonzero(pc.is_valid(uniq)).cast(pa.int64())
    positions = pa.concat_arrays([key_positions, uniq_positions])
    return pa.table([
        pa.concat_arrays([keys.filter(present), uniq.take(uniq_positions)]),
        pa.concat_arrays([pa.repeat(KEY_TYPE_KEY, len(key_positions)), pa.repeat(KEY_TYPE_UNIQ, len(uniq_positions))]),
        rows.column("store_host").take(positions),
        rows.column("commitlog_offset").take(positions),
        rows.column("store_timestamp").take(positions),
    ], schema=KEYS_DATA_SCHEMA)


@dataclass
class KeysFile:
    """The key rows of one (segment range, topic) of a task, written when the task ends."""

    lake: LakeLocation
    topic: str
    run_id: str
    range_start: int
    parts: list[pa.Table] = field(default_factory=list)

    def add(self, rows: pa.RecordBatch) -> None:
        self.parts.append(key_rows(rows))

    def close(self) -> dict[str, Any] | None:
        """Write the file; its description (as the message files'), or None without keys."""
        table = pa.concat_tables(self.parts)
        if not table.num_rows:
            return None
        table = table.sort_by([("key", "ascending"), ("commitlog_offset", "ascending")])
        rel = (f"topic={escape_partition_value(self.topic)}/part-{self.run_id}-{self.range_start:020d}-"
               f"{uuid.uuid4().hex[:12]}.zstd.parquet")
        uri = self.lake.join(KEYS_TABLE, rel)
        with self.lake.open_write(uri) as handle:
            pq.write_table(table, handle, row_group_size=_ROW_GROUP_ROWS, **KEYS_PARQUET_OPTIONS)
        bounds = {name: pc.min_max(table.column(name)).values() for name in _STATS_COLUMNS}
        stats = stats_json(table.num_rows, {n: lo.as_py() for n, (lo, _) in bounds.items()},
                           {n: hi.as_py() for n, (_, hi) in bounds.items()},
                           {name: 0 for name in KEYS_DATA_SCHEMA.names}, ("key",))
        return {"table": KEYS_TABLE, "range_start": self.range_start, "path": rel, "size": self.lake.size(uri),
                "topic": self.topic, "store_date": None, "rows": table.num_rows, "digest": "0", "stats": stats,
                "modification_time": int(time.time() * 1000)}
