"""A topic's rows in a store-time range, in (store_timestamp, commitlog_offset) order, in pages.

Replay needs every row of a range once, in a stable order, with bounded memory. One Spark
``ORDER BY ... LIMIT`` per page would sort the whole range again for every page; instead the
``messages`` table is read with ``format("delta")`` twice:

Both read one snapshot (the table's version when the scan starts), so rows tiered meanwhile
cannot slip into a page.

1. one pass collects only the sort keys of the matching rows (16 bytes a row) and sorts them
   on the driver;
2. each page of ``page_rows`` keys is read by the key range it spans: a time-bounded query,
   so Delta's file statistics and Parquet's row-group statistics on ``store_timestamp`` keep
   it to the files that hold the page.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from lakemq.jobs.lake_tables import read_table
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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


def _after(position: tuple[int, int]) -> Column:
    from pyspark.sql import functions as F

    ts, off = F.col("store_timestamp"), F.col("commitlog_offset")
    return (ts > position[0]) | ((ts == position[0]) & (off > position[1]))


def _not_after(position: tuple[int, int]) -> Column:
    from pyspark.sql import functions as F

    ts, off = F.col("store_timestamp"), F.col("commitlog_offset")
    return (ts < position[0]) | ((ts == position[0]) & (off <= position[1]))


def _in_range(spark: SparkSession, lake: LakeLocation, version: int, topic: str, begin_ms: int,
              end_ms: int) -> DataFrame:
    from pyspark.sql import functions as F

    df = read_table(spark, lake, MESSAGES_TABLE, version=version)
    return df.where((F.col("topic") == topic) & (F.col("store_timestamp") >= begin_ms)
                    & (F.col("store_timestamp") <= end_ms))


def ordered_pages(
    spark: SparkSession,
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
    rows stored in [begin_ms, end_ms]."""
    from deltalake import DeltaTable

    lake = LakeLocation.of(lake_uri, storage_options)
    version = DeltaTable(lake.table_uri(MESSAGES_TABLE), storage_options=lake.delta_options()).version()
    rows = _in_range(spark, lake, version, topic, begin_ms, end_ms)
    # A run that resumes before the range (a first run: ``after`` is (-1, -1)) has every row of
    # it left: the keys' query counts them too, one Spark job instead of two.
    resumed = after[0] >= begin_ms
    keys = ((rows.where(_after(after)) if resumed else rows).select("store_timestamp", "commitlog_offset")
            .toArrow().sort_by(_ORDER))
    total = rows.count() if resumed else keys.num_rows

    def pages() -> Iterator[pa.Table]:
        for start in range(0, keys.num_rows, page_rows):
            page = keys.slice(start, page_rows)
            first = (page.column(0)[0].as_py(), page.column(1)[0].as_py())
            last = (page.column(0)[-1].as_py(), page.column(1)[-1].as_py())
            data = (_in_range(spark, lake, version, topic, first[0], last[0])
                    .where(_after((first[0], first[1] - 1)) & _not_after(last))
                    .select(*COLUMNS).toArrow())
            yield data.sort_by(_ORDER)

    return total, keys.num_rows, pages()
