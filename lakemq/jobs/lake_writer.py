"""Spark tasks writing ``messages`` rows as Parquet data files of the Delta table.

``PartWriter`` runs inside ``mapInArrow``: each task groups its rows by sealed segment range
and partition (topic, store_date), writes one Parquet file per group straight into the table
location, and returns one row per file (path, partition values, Delta statistics, row count
and digest). Nothing is committed here: the driver commits each segment range's files in one
Delta transaction. A file whose task failed, or whose run died before the commit, is never
referenced by the log and vacuum removes it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.tiering.digest import body_crc32c, digest_of
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import DATA_SCHEMA, MESSAGES_TABLE

__all__ = ["PartWriter", "FILE_INFO_DDL", "partition_dir"]

FILE_INFO_DDL = (
    "range_start bigint, path string, size bigint, topic string, store_date string, rows bigint, "
    "digest string, stats string, modification_time bigint"
)
_STATS_COLUMNS = ("queue_id", "queue_offset", "commitlog_offset", "born_timestamp", "store_timestamp",
                  "sys_flag", "reconsume_times")
_NULLABLE = ("uniq_key", "tags", "keys", "properties", "body")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def partition_dir(topic: str, store_date: str) -> str:
    """Hive-style directory of a partition; characters outside [A-Za-z0-9_.-] become %XX."""
    escaped = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in topic)
    return f"topic={escaped}/store_date={store_date}"


def _stats(table: pa.Table) -> str:
    mins, maxs, nulls = {}, {}, {}
    for name in _STATS_COLUMNS:
        lo, hi = pc.min_max(table.column(name)).values()
        mins[name], maxs[name] = lo.as_py(), hi.as_py()
        nulls[name] = 0
    for name in _NULLABLE:
        nulls[name] = table.column(name).null_count
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


@dataclass(frozen=True)
class PartWriter:
    lake: LakeLocation
    range_starts: tuple[int, ...]  # sorted starts of the segment ranges being written
    run_id: str
    compression: str = "zstd"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = [b for b in batches if b.num_rows]
        if not rows:
            return
        table = pa.Table.from_batches(rows)
        offsets = table.column("commitlog_offset").to_numpy()
        segment = np.searchsorted(np.asarray(self.range_starts, dtype=np.int64), offsets, side="right") - 1
        topic_codes = pc.dictionary_encode(table.column("topic")).combine_chunks()
        dates = table.column("store_date").cast(pa.int32()).to_numpy()
        key = np.stack([segment, topic_codes.indices.to_numpy(), dates], axis=1)
        groups, inverse = np.unique(key, axis=0, return_inverse=True)
        order = np.argsort(inverse.reshape(-1), kind="stable")
        bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(groups) + 1))
        infos = []
        for g, (seg, topic_code, day) in enumerate(groups.tolist()):
            part = table.take(pa.array(order[bounds[g] : bounds[g + 1]]))
            part = part.take(pc.sort_indices(part.column("commitlog_offset")))
            infos.append(self._write(int(self.range_starts[seg]), topic_codes.dictionary[topic_code].as_py(),
                                     (np.datetime64(0, "D") + int(day)).astype(str), part))
        yield pa.RecordBatch.from_pylist(infos)

    def _write(self, range_start: int, topic: str, store_date: str, part: pa.Table) -> dict[str, object]:
        rel = f"{partition_dir(topic, store_date)}/part-{self.run_id}-{range_start:020d}-{uuid.uuid4().hex[:12]}.zstd.parquet"
        data = part.select(DATA_SCHEMA.names).cast(DATA_SCHEMA)
        uri = self.lake.join(MESSAGES_TABLE, rel)
        with self.lake.open_write(uri) as fh:
            pq.write_table(data, fh, compression=self.compression)
        offsets = part.column("commitlog_offset").to_numpy()
        digest = digest_of(offsets, body_crc32c(part.column("body").to_pylist()))
        return {
            "range_start": range_start, "path": rel, "size": self.lake.size(uri), "topic": topic,
            "store_date": store_date, "rows": part.num_rows, "digest": str(digest), "stats": _stats(part),
            "modification_time": int(time.time() * 1000),
        }
