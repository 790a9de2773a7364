"""A topic's rows in a store-time range, in (store_timestamp, commitlog_offset) order, in pages.

Replay needs every row of a range once, in a stable order, with bounded memory. One Spark
``ORDER BY ... LIMIT`` per page would sort the whole range again for every page; instead the
``messages`` table is read with ``format("delta")`` twice:

Both read one snapshot (the table's version when the scan starts), so rows tiered meanwhile
cannot slip into a page.

1. one pass collects only the sort keys of the matching rows (16 bytes a row) and sorts them
   here (a sort in Spark would shuffle);
2. each page of ``page_rows`` keys is read by the key range it spans: a time-bounded query,
   so Delta's file statistics and Parquet's row-group statistics on ``store_timestamp`` keep
   it to the files that hold the page.

A position (store_timestamp, commitlog_offset) does not name a broker: two brokers' rows may
share one. A page holds all rows of each key it spans, so no row is read twice or skipped.

Both are SQL (:mod:`lakemq.jobs.lake_sql`): they run alike on a Spark here and on the lake
service.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lakemq.jobs.lake_sql import SqlSession, delta_table, sql_session, sql_string
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COLUMNS", "ordered_pages"]

COLUMNS = (
    "msg_id",
    "uniq_key",
    "body",
    "flag",
    "sys_flag",
    "queue_id",
    "properties",
    "store_timestamp",
    "commitlog_offset",
)
_ORDER = [("store_timestamp", "ascending"), ("commitlog_offset", "ascending")]


def _after(position: tuple[int, int]) -> str:
    ts, off = int(position[0]), int(position[1])
    return f"(store_timestamp > {ts} OR (store_timestamp = {ts} AND commitlog_offset > {off}))"


def _not_after(position: tuple[int, int]) -> str:
    ts, off = int(position[0]), int(position[1])
    return f"(store_timestamp < {ts} OR (store_timestamp = {ts} AND commitlog_offset <= {off}))"


def _in_range(session: SqlSession, lake: LakeLocation, version: int, topic: str, begin_ms: int,
              end_ms: int) -> str:
    """FROM and WHERE of ``topic``'s rows stored in [begin_ms, end_ms] at ``version``."""
    return (f"FROM {delta_table(session, lake, MESSAGES_TABLE, version)} WHERE topic = {sql_string(topic)} "
            f"AND store_timestamp >= {int(begin_ms)} AND store_timestamp <= {int(end_ms)}")


def ordered_pages(
    spark: SqlSession | Any,
    lake_uri: str,
    *,
    topic: str,
    begin_ms: int,
    end_ms: int,
    after: tuple[int, int] = (-1, -1),
    page_rows: int = 100_000,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, int, Iterator[pa.Table]]:
    """(rows in the range, rows after ``after``, those rows' pages in order) for ``topic``'s
    rows stored in [begin_ms, end_ms]. ``spark``: a SparkSession or a :class:`SqlSession`."""
    from deltalake import DeltaTable

    session = sql_session(spark)
    lake = LakeLocation.of(lake_uri, storage_options)
    version = DeltaTable(lake.table_uri(MESSAGES_TABLE), storage_options=lake.delta_options()).version()
    rows = _in_range(session, lake, version, topic, begin_ms, end_ms)
    # A run that resumes before the range (a first run: ``after`` is (-1, -1)) has every row of
    # it left: the keys' query counts them too, one Spark job instead of two.
    resumed = after[0] >= begin_ms
    keys = session.sql(f"SELECT store_timestamp, commitlog_offset {rows}"
                       f"{' AND ' + _after(after) if resumed else ''}").sort_by(_ORDER)
    total = session.sql(f"SELECT count(*) AS n {rows}").column(0)[0].as_py() if resumed else keys.num_rows

    # Brokers' CommitLog offsets overlap, so two rows (two brokers') can share a sort key: a
    # page ends after the last of its last key's rows (each page's query reads whole keys).
    # Python lists, not numpy: a client of the lake service keeps numpy out (connect_client).
    times = keys.column(0).to_pylist()
    offsets = keys.column(1).to_pylist()

    def pages() -> Iterator[pa.Table]:
        start = 0
        while start < keys.num_rows:
            end = min(start + page_rows, keys.num_rows)
            while end < keys.num_rows and times[end] == times[end - 1] and offsets[end] == offsets[end - 1]:
                end += 1
            page = keys.slice(start, end - start)
            start = end
            first = (page.column(0)[0].as_py(), page.column(1)[0].as_py())
            last = (page.column(0)[-1].as_py(), page.column(1)[-1].as_py())
            span = _in_range(session, lake, version, topic, first[0], last[0])
            yield session.sql(f"SELECT {', '.join(COLUMNS)} {span} AND {_after((first[0], first[1] - 1))} "
                              f"AND {_not_after(last)}").sort_by(_ORDER)

    return total, keys.num_rows, pages()
