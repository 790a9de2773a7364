"""Find messages in the lake by key or unique key: the lake half of ``lakemq admin message query``.

The hot tier answers with its IndexFiles; history that hot retention has deleted lives only in
the ``messages`` table, read here with ``format("delta")``. Delta and Spark prune what they
read from the query's conditions:

- the ``topic`` and ``store_date`` partitions (the time range gives the days);
- files, by the ``store_timestamp`` and ``uniq_key`` statistics in the Delta log (a producer's
  unique keys grow with time, so a file covers a narrow span of them and a look-up by unique
  key usually reads one file);
- row groups, by the same columns' Parquet statistics; only the columns the result needs are
  read, and the rest only for the rows that match.

``KEYS`` holds space-separated keys; a key matches when it is one of them: equal, a prefix
followed by a space, a suffix after a space, or between spaces.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakemq.jobs.lake_tables import read_table, table_exists
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import LAKE_MESSAGE_COLUMNS, MESSAGES_TABLE, LakeMessage

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

__all__ = ["find_messages", "key_matches"]

_DAY_MS = 86_400_000


def _day(ms: int) -> datetime.date:
    return datetime.date(1970, 1, 1) + datetime.timedelta(days=ms // _DAY_MS)


def key_matches(keys: Column, key: str) -> Column:
    """Whether the space-separated ``keys`` hold ``key`` (a key never holds a space)."""
    from pyspark.sql import functions as F

    if " " in key or not key:
        return F.lit(False)
    return (keys == key) | keys.startswith(f"{key} ") | keys.endswith(f" {key}") | keys.contains(f" {key} ")


def find_messages(
    spark: SparkSession, lake_uri: str, *, topic: str, key: str | None = None, unique_key: str | None = None,
    begin_ms: int = 0, end_ms: int | None = None, limit: int = 64,
    storage_options: Mapping[str, str] | None = None,
) -> list[LakeMessage]:
    """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``unique_key``),
    stored in ``[begin_ms, end_ms]``, oldest first, at most ``limit``."""
    from pyspark.sql import functions as F

    if (key is None) == (unique_key is None):
        raise ValueError("give exactly one of key and unique_key")
    lake = LakeLocation.of(lake_uri, storage_options)
    if limit <= 0 or not table_exists(lake, MESSAGES_TABLE):
        return []
    df = read_table(spark, lake, MESSAGES_TABLE)
    cond = (F.col("topic") == topic) & (F.col("store_date") >= F.lit(_day(max(begin_ms, 0))))
    if begin_ms > 0:
        cond &= F.col("store_timestamp") >= begin_ms
    if end_ms is not None:
        cond &= (F.col("store_date") <= F.lit(_day(end_ms))) & (F.col("store_timestamp") <= end_ms)
    cond &= F.col("uniq_key") == unique_key if unique_key is not None else key_matches(F.col("keys"), str(key))
    rows = df.where(cond).select(*LAKE_MESSAGE_COLUMNS).orderBy("commitlog_offset").limit(limit).collect()
    return [LakeMessage.from_row(topic, r.asDict()) for r in rows]
