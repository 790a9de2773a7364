"""Spark tasks turning sealed CommitLog byte ranges into Parquet data files of the Delta table.

Each task reads consecutive byte ranges of one sealed segment range straight from the store,
decodes them (:mod:`lakemq.jobs.decode`), and appends the rows to one Parquet file per
partition (topic, store_date) in the table location, a row group at a time, and the messages'
keys to one ``message_keys`` file per topic (:mod:`lakemq.jobs.key_files`). It returns one
small row per file (table, path, partition values, Delta statistics, row count and digest), so
the message bytes never cross into the JVM. Nothing is committed here: the driver commits each
segment range's files in one Delta transaction per table. A file whose task failed, or whose run died
before the commit, is never referenced by the log and vacuum removes it.

Rows keep CommitLog order inside a file. Parquet is written with dictionaries only for the
columns that repeat (kind, tags, hosts) and statistics only for the columns readers prune or
filter by; the Delta statistics of each file give min, max and null count of the same columns
(every reader of "standard Delta tables" prunes by them, so they must be complete).
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.jobs.decode import decode_range, offsets_data
from lakemq.jobs.delta_stats import stats_json
from lakemq.jobs.key_files import KeysFile
from lakemq.tiering.digest import crc32c_slices, digest_of
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import SealedSegment
from lakemq.tiering.tables import DATA_SCHEMA, MESSAGES_TABLE, escape_partition_value

log = logging.getLogger(__name__)

__all__ = ["FILE_INFO_DDL", "PARQUET_OPTIONS", "ByteRange", "SegmentWriter", "WriteTask", "partition_dir", "plan_tasks",
           "write_task"]

FILE_INFO_DDL = (
    "table string, range_start bigint, path string, size bigint, topic string, store_date string, rows bigint, "
    "digest string, stats string, modification_time bigint"
)
_FILE_INFO_SCHEMA = pa.schema([
    ("table", pa.string()), ("range_start", pa.int64()), ("path", pa.string()), ("size", pa.int64()), ("topic", pa.string()),
    ("store_date", pa.string()), ("rows", pa.int64()), ("digest", pa.string()), ("stats", pa.string()),
    ("modification_time", pa.int64()),
])
_STATS_COLUMNS = ("queue_id", "queue_offset", "commitlog_offset", "born_timestamp", "store_timestamp",
                  "sys_flag", "reconsume_times")
_STRING_STATS = ("kind", "uniq_key", "tags", "keys")  # string columns people filter on
_NULLABLE = ("uniq_key", "tags", "keys")  # as Delta's writer, no statistics for maps and binaries
_ROW_GROUP_ROWS = 128 * 1024
_ROW_GROUP_BYTES = 32 << 20

# Shared with the benchmark's baseline, so both write the same files.
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["kind", "tags", "born_host", "store_host"],
    "write_statistics": [*_STATS_COLUMNS, *_STRING_STATS],
    # Page statistics too, so a read of a few offsets (a look-up's rows) reads a page of each
    # column, not the row group's 128 Ki rows.
    "write_page_index": True,
}


def partition_dir(topic: str, store_date: str) -> str:
    """Hive-style directory of a ``messages`` partition."""
    return f"topic={escape_partition_value(topic)}/store_date={store_date}"


@dataclass(frozen=True, slots=True)
class ByteRange:
    """CommitLog offsets [start, end) of one sealed segment range, starting on a record."""

    range_start: int  # the sealed range the rows belong to (one Delta commit)
    file_uri: str  # the CommitLog file in the store
    file_start: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class WriteTask:
    """One Spark task: consecutive byte ranges, of one or more sealed segment ranges."""

    pieces: tuple[ByteRange, ...]

    @property
    def size(self) -> int:
        return sum(p.end - p.start for p in self.pieces)


def plan_tasks(store: LakeLocation, segments: Sequence[SealedSegment], *, parallelism: int,
               max_task_bytes: int = 256 << 20) -> list[WriteTask]:
    """Cut the segments' byte ranges, in CommitLog order, into one task per core of about equal
    size (more when a task would exceed ``max_task_bytes``): every task costs a Python worker
    round trip and its own files, so one wave of even tasks is the cheapest plan."""
    pieces = [ByteRange(s.range_start, store.join("commitlog", s.file_name), s.file_start, a, b)
              for s in segments for a, b in s.byte_ranges()]
    total = sum(p.end - p.start for p in pieces)
    count = max(1, parallelism, -(-total // max_task_bytes))
    tasks: list[WriteTask] = []
    current: list[ByteRange] = []
    done = 0
    for i, piece in enumerate(pieces):
        current.append(piece)
        done += piece.end - piece.start
        # Cut once the next task's share is reached; the last task takes the rest.
        if done * count >= total * (len(tasks) + 1) and i < len(pieces) - 1:
            tasks.append(WriteTask(tuple(current)))
            current = []
    if current:
        tasks.append(WriteTask(tuple(current)))
    return tasks


@dataclass
class _PartFile:
    """One Parquet file being written: rows buffered into row groups, stats and digest kept."""

    lake: LakeLocation
    rel: str
    topic: str
    store_date: str
    pending: list[pa.RecordBatch] = field(default_factory=list)
    pending_rows: int = 0
    pending_bytes: int = 0
    rows: int = 0
    digest: int = 0
    mins: dict[str, Any] = field(default_factory=dict)
    maxs: dict[str, Any] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)
    handle: Any = None
    writer: pq.ParquetWriter | None = None

    @property
    def uri(self) -> str:
        return self.lake.join(MESSAGES_TABLE, self.rel)

    def add(self, rows: pa.RecordBatch, digest: int) -> None:
        self.rows += rows.num_rows
        self.digest = (self.digest + digest) % (1 << 64)
        for name in (*_STATS_COLUMNS, *_STRING_STATS):
            lo, hi = (v.as_py() for v in pc.min_max(rows.column(name)).values())
            if lo is not None:
                self.mins[name] = lo if name not in self.mins else min(self.mins[name], lo)
                self.maxs[name] = hi if name not in self.maxs else max(self.maxs[name], hi)
        for name in _NULLABLE:
            self.nulls[name] = self.nulls.get(name, 0) + rows.column(name).null_count
        self.pending.append(rows.select(DATA_SCHEMA.names))
        self.pending_rows += rows.num_rows
        self.pending_bytes += rows.nbytes
        if self.pending_rows >= _ROW_GROUP_ROWS or self.pending_bytes >= _ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.handle = self.lake.open_write(self.uri)
            self.writer = pq.ParquetWriter(self.handle, DATA_SCHEMA, **PARQUET_OPTIONS)
        table = pa.Table.from_batches(self.pending)
        if table.schema != DATA_SCHEMA:
            table = table.cast(DATA_SCHEMA)
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self, range_start: int) -> dict[str, Any]:
        self.flush()
        assert self.writer is not None
        self.writer.close()
        self.handle.close()
        return {
            "table": MESSAGES_TABLE, "range_start": range_start, "path": self.rel, "size": self.lake.size(self.uri), "topic": self.topic,
            "store_date": self.store_date, "rows": self.rows, "digest": str(self.digest), "stats": self._stats(),
            "modification_time": int(time.time() * 1000),
        }

    def abort(self) -> None:
        for closeable in (self.writer, self.handle):
            if closeable is not None:
                try:
                    closeable.close()
                except (OSError, pa.ArrowException) as exc:  # the task failed already; raise its error
                    log.debug("closing %s after a failure: %s", self.rel, exc)

    def _stats(self) -> str:
        nulls = {**{name: 0 for name in (*_STATS_COLUMNS, "kind")}, **self.nulls}
        return stats_json(self.rows, self.mins, self.maxs, nulls, _STRING_STATS)


def _body_crcs(body: pa.Array) -> np.ndarray:
    """CRC32C of every body, read in place from the array's buffers (a null body counts as empty)."""
    offsets, data = offsets_data(body)
    return crc32c_slices(memoryview(data), offsets[:-1], offsets[1:])  # type: ignore[arg-type]


def _groups(batch: pa.RecordBatch) -> Iterator[tuple[str, str, pa.RecordBatch, np.ndarray]]:
    """(topic, store_date, rows, row positions) per partition, rows in CommitLog order."""
    topics = pc.dictionary_encode(batch.column("topic"))
    days = batch.column("store_date").cast(pa.int32()).to_numpy()
    first_day = int(days.min())
    code = topics.indices.to_numpy().astype(np.int64) * (int(days.max()) - first_day + 1) + (days - first_day)
    if (np.diff(code) >= 0).all():  # grouped already (decode_range(grouped=True))
        order = np.arange(batch.num_rows)
        bounds = [0, *(np.flatnonzero(np.diff(code)) + 1).tolist(), batch.num_rows]
    else:
        order = np.argsort(code, kind="stable")
        sorted_code = code[order]
        bounds = [0, *(np.flatnonzero(np.diff(sorted_code)) + 1).tolist(), batch.num_rows]
        batch = batch.take(pa.array(order))
    names = topics.dictionary.to_pylist()
    for a, b in itertools.pairwise(bounds):
        topic = names[topics.indices[int(order[a])].as_py()]
        day = (np.datetime64(0, "D") + int(days[order[a]])).astype(str)
        yield topic, day, batch.slice(a, b - a), order[a:b]


def write_task(store: LakeLocation, lake: LakeLocation, task: WriteTask, run_id: str, *,
               skip_corrupt: bool) -> list[dict[str, Any]]:
    """Read, decode and write one task; returns the descriptions (FILE_INFO_DDL) of its files in
    ``messages`` and in ``message_keys``."""
    files: dict[tuple[int, str, str], _PartFile] = {}
    keys: dict[tuple[int, str], KeysFile] = {}
    try:
        for piece in task.pieces:
            data = store.read_range(piece.file_uri, piece.start - piece.file_start, piece.end - piece.file_start)
            # Sealing checked every body CRC and keeps a digest of the bodies, which the written
            # rows must match before anything is committed; checking the CRCs again adds nothing.
            batch, skipped = decode_range(data, piece.start, skip_corrupt=skip_corrupt, check_crc=False,
                                         grouped=True)
            for lo, hi in skipped:
                log.warning("skipped corrupt CommitLog bytes [%d, %d) of %s", lo, hi, piece.file_uri)
            if not batch.num_rows:
                continue
            offsets = batch.column("commitlog_offset").to_numpy()
            crcs = _body_crcs(batch.column("body"))
            for topic, day, rows, positions in _groups(batch):
                part = files.get((piece.range_start, topic, day))
                if part is None:
                    rel = (f"{partition_dir(topic, day)}/part-{run_id}-{piece.range_start:020d}-"
                           f"{uuid.uuid4().hex[:12]}.zstd.parquet")
                    part = files[(piece.range_start, topic, day)] = _PartFile(lake, rel, topic, day)
                part.add(rows, digest_of(offsets[positions], crcs[positions]))
                keyed = keys.get((piece.range_start, topic))
                if keyed is None:
                    keyed = keys[(piece.range_start, topic)] = KeysFile(lake, topic, run_id, piece.range_start)
                keyed.add(rows)
        infos = [part.close(range_start) for (range_start, _, _), part in files.items()]
        return infos + [info for info in (k.close() for k in keys.values()) if info is not None]
    except BaseException:
        for part in files.values():
            part.abort()
        raise


@dataclass(frozen=True)
class SegmentWriter:
    """The ``mapInArrow`` function: task numbers in, file descriptions out."""

    store: LakeLocation
    lake: LakeLocation
    tasks: tuple[WriteTask, ...]
    run_id: str
    skip_corrupt: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task_id in batch.column(0).to_pylist():
                infos = write_task(self.store, self.lake, self.tasks[task_id], self.run_id,
                                   skip_corrupt=self.skip_corrupt)
                if infos:
                    yield pa.RecordBatch.from_pylist(infos, schema=_FILE_INFO_SCHEMA)
