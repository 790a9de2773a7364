"""Find messages in the lake by key or unique key: the lake half of ``lakemq admin message query``.

The hot tier answers with its IndexFiles; history that hot retention has deleted lives only in
the ``messages`` table. A look-up is planned on the driver from the Delta log alone and then
reads as little Parquet as it can:

1. files: only the topic's partitions, only ``store_date`` days inside the time range, only
   files whose ``store_timestamp`` statistics overlap it, and, by unique key, only files whose
   ``uniq_key`` statistics hold the key (a producer's unique keys grow with time, so a file
   covers a narrow span of them);
2. one Spark task per group of candidate files; in each file the row groups are pruned the same
   way by their Parquet statistics, and only the match columns (``keys`` or ``uniq_key``, and
   ``store_timestamp`` when a time range is given) are read;
3. the rest of the columns are read only for row groups holding a match, and only the matching
   rows (at most ``limit`` per task, oldest first) travel back.

``KEYS`` holds space-separated keys; a key matches when it is one of them, tested with four
vectorized string comparisons (equal, prefix, suffix, infix between spaces).
"""

from __future__ import annotations

import datetime
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LakeMessage", "LookupPlan", "find_messages", "plan_lookup"]

_COLUMNS = ("msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys", "body",
            "properties", "reconsume_times", "born_host", "store_host", "commitlog_offset")
_DATA_COLUMNS = tuple(c for c in _COLUMNS if c != "topic")
_RESULT_SCHEMA = pa.schema([
    ("msg_id", pa.string()), ("uniq_key", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("store_timestamp", pa.int64()), ("tags", pa.string()), ("keys", pa.string()), ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())), ("reconsume_times", pa.int32()),
    ("born_host", pa.string()), ("store_host", pa.string()), ("commitlog_offset", pa.int64()),
])
_RESULT_DDL = (
    "msg_id string, uniq_key string, queue_id int, queue_offset bigint, store_timestamp bigint, tags string, "
    "keys string, body binary, properties map<string,string>, reconsume_times int, born_host string, "
    "store_host string, commitlog_offset bigint"
)
_GROUP_BYTES = 256 << 20
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class LakeMessage:
    """One message as the lake holds it (body as stored)."""

    msg_id: str
    uniq_key: str | None
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp: int
    tags: str | None
    keys: tuple[str, ...]
    body: bytes
    properties: Mapping[str, str]
    reconsume_times: int
    born_host: str
    store_host: str
    commitlog_offset: int


@dataclass(frozen=True, slots=True)
class LookupPlan:
    """What a look-up reads: candidate files (URIs, grouped per Spark task) out of how many."""

    groups: tuple[tuple[str, ...], ...]
    files_in_table: int

    @property
    def files(self) -> int:
        return sum(len(g) for g in self.groups)


@dataclass(frozen=True)
class _Match:
    """A look-up's condition, applied to files, row groups and rows."""

    value: str
    by_unique_key: bool
    begin_ms: int
    end_ms: int | None

    @property
    def column(self) -> str:
        return "uniq_key" if self.by_unique_key else "keys"

    def time_overlaps(self, lo: Any, hi: Any) -> bool:
        if lo is None or hi is None:
            return True
        return int(hi) >= self.begin_ms and (self.end_ms is None or int(lo) <= self.end_ms)

    def key_in(self, lo: Any, hi: Any) -> bool:
        """By unique key, whether [lo, hi] may hold it; keys are tokens, which min/max cannot bound."""
        if not self.by_unique_key or lo is None or hi is None:
            return True
        return bool(lo <= self.value <= hi)

    @property
    def timed(self) -> bool:
        return self.begin_ms > 0 or self.end_ms is not None

    @property
    def columns(self) -> list[str]:
        """What deciding a match reads: the key column, and store times only for a time range."""
        return [self.column, "store_timestamp"] if self.timed else [self.column]

    def rows(self, table: pa.Table) -> pa.ChunkedArray:
        """The mask of matching rows of a table holding :attr:`columns`."""
        col = table.column(self.column)
        if self.by_unique_key:
            mask = pc.equal(col, self.value)
        elif " " in self.value:
            mask = pc.equal(col, None)  # a key never holds a space: all null, nothing matches
        else:
            v = self.value
            mask = pc.or_(pc.or_(pc.equal(col, v), pc.starts_with(col, f"{v} ")),
                          pc.or_(pc.ends_with(col, f" {v}"), pc.match_substring(col, f" {v} ")))
        if self.timed:
            ts = table.column("store_timestamp")
            mask = pc.and_(mask, pc.greater_equal(ts, self.begin_ms))
            if self.end_ms is not None:
                mask = pc.and_(mask, pc.less_equal(ts, self.end_ms))
        return pc.fill_null(mask, False)


def _row_group_may_match(meta: Any, names: list[str], match: _Match) -> bool:
    def bounds(name: str) -> tuple[Any, Any]:
        stats = meta.column(names.index(name)).statistics
        if stats is None or not stats.has_min_max:
            return None, None
        return stats.min, stats.max

    return match.time_overlaps(*bounds("store_timestamp")) and match.key_in(*bounds(match.column))


def _scan_file(fh: Any, match: _Match, limit: int) -> pa.Table | None:
    pf = pq.ParquetFile(fh)
    names = pf.schema_arrow.names
    found = []
    for g in range(pf.metadata.num_row_groups):
        if not _row_group_may_match(pf.metadata.row_group(g), names, match):
            continue
        mask = match.rows(pf.read_row_group(g, columns=match.columns))
        if not pc.any(mask).as_py():
            continue
        rows = pf.read_row_group(g, columns=list(_DATA_COLUMNS)).filter(mask)
        found.append(rows)
        if sum(t.num_rows for t in found) >= limit:
            break
    return pa.concat_tables(found) if found else None


@dataclass(frozen=True)
class _Scanner:
    """The ``mapInArrow`` function: file-group numbers in, matching rows out."""

    lake: LakeLocation
    groups: tuple[tuple[str, ...], ...]
    match: _Match
    limit: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for g in batch.column(0).to_pylist():
                found = []
                for uri in self.groups[g]:
                    with self.lake.fs.open(uri, "rb") as fh:
                        rows = _scan_file(fh, self.match, self.limit)
                    if rows is not None:
                        found.append(rows)
                if not found:
                    continue
                rows = pa.concat_tables(found)
                rows = rows.take(pc.sort_indices(rows.column("commitlog_offset"))).slice(0, self.limit)
                yield from rows.select(_RESULT_SCHEMA.names).cast(_RESULT_SCHEMA).to_batches()


def _day(ms: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=ms // _DAY_MS)).isoformat()


def plan_lookup(lake: LakeLocation, match: _Match, topic: str, *, parallelism: int = 1) -> LookupPlan:
    """Candidate files from the Delta log's partition values and statistics, in groups of up to
    256 MiB, and at least two groups per core when there are files enough."""
    from deltalake import DeltaTable

    uri = lake.table_uri(MESSAGES_TABLE)
    table = DeltaTable(uri, storage_options=lake.delta_options())
    actions = pa.table(table.get_add_actions(flatten=True))
    total = actions.num_rows
    names = set(actions.column_names)
    keep = pc.equal(actions.column("partition.topic"), topic)
    dates = actions.column("partition.store_date").cast(pa.string())
    keep = pc.and_(keep, pc.greater_equal(dates, _day(max(match.begin_ms, 0))))
    if match.end_ms is not None:
        keep = pc.and_(keep, pc.less_equal(dates, _day(match.end_ms)))
    if "min.store_timestamp" in names:
        lo, hi = actions.column("min.store_timestamp"), actions.column("max.store_timestamp")
        overlap = pc.greater_equal(hi, match.begin_ms)
        if match.end_ms is not None:
            overlap = pc.and_(overlap, pc.less_equal(lo, match.end_ms))
        keep = pc.and_(keep, pc.fill_null(overlap, True))
    if match.by_unique_key and "min.uniq_key" in names:
        lo, hi = actions.column("min.uniq_key"), actions.column("max.uniq_key")
        holds = pc.and_(pc.less_equal(lo, match.value), pc.greater_equal(hi, match.value))
        keep = pc.and_(keep, pc.fill_null(holds, True))
    picked = actions.filter(pc.fill_null(keep, False)).select(["path", "size_bytes"]).to_pylist()
    group_bytes = min(_GROUP_BYTES, max(1, sum(int(a["size_bytes"]) for a in picked) // (2 * max(1, parallelism))))
    groups: list[tuple[str, ...]] = []
    current: list[str] = []
    size = 0
    for a in picked:
        rel = a["path"]
        current.append(rel if "://" in rel or rel.startswith("/") else f"{uri.rstrip('/')}/{urllib.parse.unquote(rel)}")
        size += int(a["size_bytes"])
        if size >= group_bytes:
            groups.append(tuple(current))
            current, size = [], 0
    if current:
        groups.append(tuple(current))
    return LookupPlan(tuple(groups), total)


def find_messages(
    spark: SparkSession, lake_uri: str, *, topic: str, key: str | None = None, unique_key: str | None = None,
    begin_ms: int = 0, end_ms: int | None = None, limit: int = 64,
    storage_options: Mapping[str, str] | None = None,
) -> list[LakeMessage]:
    """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``unique_key``),
    stored in ``[begin_ms, end_ms]``, oldest first, at most ``limit``."""
    if (key is None) == (unique_key is None):
        raise ValueError("give exactly one of key and unique_key")
    lake = LakeLocation.of(lake_uri, storage_options)
    match = _Match(unique_key if unique_key is not None else str(key), unique_key is not None, begin_ms, end_ms)
    plan = plan_lookup(lake, match, topic, parallelism=spark.sparkContext.defaultParallelism)
    if not plan.groups or limit <= 0:
        return []
    scanner = _Scanner(lake, plan.groups, match, limit)
    rows = spark.range(len(plan.groups), numPartitions=len(plan.groups)).mapInArrow(scanner, _RESULT_DDL).collect()
    rows = sorted(rows, key=lambda r: r["commitlog_offset"])[:limit]
    return [
        LakeMessage(
            msg_id=r["msg_id"], uniq_key=r["uniq_key"], topic=topic, queue_id=r["queue_id"],
            queue_offset=r["queue_offset"], store_timestamp=r["store_timestamp"], tags=r["tags"],
            keys=tuple((r["keys"] or "").split()), body=bytes(r["body"] or b""),
            properties=dict(r["properties"] or {}), reconsume_times=r["reconsume_times"],
            born_host=r["born_host"], store_host=r["store_host"], commitlog_offset=r["commitlog_offset"],
        )
        for r in rows
    ]
