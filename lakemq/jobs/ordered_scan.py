"""A topic's rows in a store-time range, in (store_timestamp, commitlog_offset) order, in pages.

Replay needs every row of a range once, in a stable order, with bounded memory, and fast;
a Spark ``ORDER BY ... LIMIT`` per page re-scans the range for every page and moves every
body through the JVM and back. This reads through the ``lakedelta`` source's own reader
(:class:`lakemq.jobs.delta_source.DeltaReader`, no JVM involved) with the same file pruning
(topic partition, store_timestamp statistics):

1. one pass keeps only the sort keys of the matching rows (16 bytes a row) and where they are;
2. the keys are sorted; each page of ``page_rows`` keys is filled from the files that hold
   them, decoded files kept in a cache of at most ``cache_bytes``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE

__all__ = ["COLUMNS", "ordered_pages"]

COLUMNS = (
    "msg_id",
    "uniq_key",
    "body",
    "flag",
    "sys_flag",
    "properties",
    "store_timestamp",
    "commitlog_offset",
)


class _Files:
    """The pruned snapshot files, each read whole by the lakedelta reader, with a byte-capped cache."""

    def __init__(self, lake: LakeLocation, topic: str, begin_ms: int, end_ms: int, cache_bytes: int) -> None:
        from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThanOrEqual

        from lakemq.jobs.delta_source import DeltaDataSource, FileGroup

        options = {"path": lake.table_uri(MESSAGES_TABLE), "storage_options": json.dumps(lake.options)}
        source = DeltaDataSource(options)
        self._reader = source.reader(source.schema())
        filters = [
            EqualTo(("topic",), topic),
            GreaterThanOrEqual(("store_timestamp",), begin_ms),
            LessThanOrEqual(("store_timestamp",), end_ms),
        ]
        list(self._reader.pushFilters(filters))
        self.files = [FileGroup([f]) for group in self._reader.partitions() for f in group.files]
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()
        self._cache_bytes = cache_bytes

    def read(self, index: int) -> pa.Table:
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        table = pa.Table.from_batches(
            list(self._reader.read(self.files[index])), schema=self._reader.arrow_schema
        )
        table = table.select(list(COLUMNS))
        self._cache[index] = table
        while len(self._cache) > 1 and sum(t.nbytes for t in self._cache.values()) > self._cache_bytes:
            self._cache.popitem(last=False)
        return table


def _masks(table: pa.Table, begin_ms: int, end_ms: int, after: tuple[int, int]) -> tuple[pa.Array, pa.Array]:
    """Row masks: stored in [begin_ms, end_ms]; that and after position ``after``."""
    ts, off = table.column("store_timestamp"), table.column("commitlog_offset")
    in_range = pc.and_(pc.greater_equal(ts, begin_ms), pc.less_equal(ts, end_ms))
    later = pc.or_(pc.greater(ts, after[0]), pc.and_(pc.equal(ts, after[0]), pc.greater(off, after[1])))
    return in_range, pc.and_(in_range, later)


def ordered_pages(
    lake_uri: str,
    *,
    topic: str,
    begin_ms: int,
    end_ms: int,
    after: tuple[int, int] = (-1, -1),
    page_rows: int = 100_000,
    cache_bytes: int = 256 << 20,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int, Iterator[pa.Table]]:
    """(rows in the range, rows after ``after``, those rows' pages in order) for ``topic``'s
    rows stored in [begin_ms, end_ms]."""
    files = _Files(LakeLocation.of(lake_uri, storage_options), topic, begin_ms, end_ms, cache_bytes)
    keys: list[pa.Table] = []
    total = 0
    for i in range(len(files.files)):
        table = files.read(i)
        in_range, mask = _masks(table, begin_ms, end_ms, after)
        total += pc.sum(in_range).as_py() or 0
        rows = pc.indices_nonzero(mask)
        keys.append(
            pa.table(
                {
                    "store_timestamp": table.column("store_timestamp").filter(mask),
                    "commitlog_offset": table.column("commitlog_offset").filter(mask),
                    "file": pa.array([i] * len(rows), pa.int32()),
                    "row": rows.cast(pa.int64()),
                }
            )
        )
    order = (
        pa.concat_tables(keys)
        if keys
        else pa.table(
            {
                "store_timestamp": pa.array([], pa.int64()),
                "commitlog_offset": pa.array([], pa.int64()),
                "file": pa.array([], pa.int32()),
                "row": pa.array([], pa.int64()),
            }
        )
    )
    order = order.sort_by([("store_timestamp", "ascending"), ("commitlog_offset", "ascending")])

    def pages() -> Iterator[pa.Table]:
        for start in range(0, order.num_rows, page_rows):
            page = order.slice(start, page_rows)
            parts: list[pa.Table] = []
            positions: list[Any] = []
            for file_index in pc.unique(page.column("file")).to_pylist():
                picked = pc.indices_nonzero(pc.equal(page.column("file"), file_index))
                parts.append(files.read(file_index).take(page.column("row").take(picked)))
                positions.append(picked)
            merged = pa.concat_tables(parts)
            # Put the rows back into the page's (sorted) order.
            yield merged.take(pc.sort_indices(pa.concat_arrays([p.cast(pa.int64()) for p in positions])))

    return total, order.num_rows, pages()
