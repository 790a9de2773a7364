"""Find messages in the lake by key or unique key: the lake half of ``lakemq admin message query``.

The hot tier answers with its IndexFiles; history that hot retention has deleted lives only in
the ``messages`` table. The topic filter prunes partitions, so a look-up reads one topic's
files; the time range prunes by ``store_timestamp`` statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakemq.jobs.sql import register_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["LakeMessage", "find_messages"]

_COLUMNS = ("msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys", "body",
            "properties", "reconsume_times", "born_host", "store_host", "commitlog_offset")


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


def find_messages(
    spark: "SparkSession", lake_uri: str, *, topic: str, key: str | None = None, unique_key: str | None = None,
    begin_ms: int = 0, end_ms: int | None = None, limit: int = 64,
    storage_options: Mapping[str, str] | None = None,
) -> list[LakeMessage]:
    """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``unique_key``),
    stored in ``[begin_ms, end_ms]``, oldest first, at most ``limit``."""
    if (key is None) == (unique_key is None):
        raise ValueError("give exactly one of key and unique_key")
    register_views(spark, lake_uri, storage_options=storage_options)
    match = "uniq_key = :value" if unique_key is not None else "array_contains(split(keys, ' '), :value)"
    args: dict[str, object] = {"topic": topic, "value": unique_key if unique_key is not None else key,
                               "begin": begin_ms, "limit": limit}
    upper = ""
    if end_ms is not None:
        upper, args["end"] = " AND store_timestamp <= :end", end_ms
    rows = spark.sql(
        f"SELECT {', '.join(_COLUMNS)} FROM all_messages WHERE topic = :topic AND {match} "
        f"AND store_timestamp >= :begin{upper} ORDER BY commitlog_offset LIMIT :limit",
        args=args,
    ).collect()
    return [
        LakeMessage(
            msg_id=r["msg_id"], uniq_key=r["uniq_key"], topic=r["topic"], queue_id=r["queue_id"],
            queue_offset=r["queue_offset"], store_timestamp=r["store_timestamp"], tags=r["tags"],
            keys=tuple((r["keys"] or "").split()), body=bytes(r["body"] or b""),
            properties=dict(r["properties"] or {}), reconsume_times=r["reconsume_times"],
            born_host=r["born_host"], store_host=r["store_host"], commitlog_offset=r["commitlog_offset"],
        )
        for r in rows
    ]
