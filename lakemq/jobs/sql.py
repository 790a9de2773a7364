"""Spark SQL over the lake: views over the Delta tables, time travel, key lookups.

Views (all over the ``messages`` Delta table, read through the ``lakedelta`` source):

- ``all_messages``: every record, system topics included;
- ``messages``: user topics only (``kind = 'normal'``);
- ``schedule_messages``: delayed messages waiting in SCHEDULE_TOPIC_XXXX;
- ``transactions_half`` / ``transactions_op``: the two transaction system topics;
- ``transactions_derived``: one row per half message with its outcome: COMMIT when a message
  with the commit flag points back at it (PREPARED TRANSACTION OFFSET = the half message's
  CommitLog offset), ROLLBACK when only an op record marks it done, else PENDING; and its
  check count (TRANSACTION_CHECK_TIMES);
- ``transactions``: the ``transactions`` Delta table the transaction sweep writes (one row per
  transaction, see :mod:`lakemq.jobs.transaction_sweep`) when it exists, else the same as
  ``transactions_derived``.

``t VERSION AS OF n`` in a query is served by registering ``t`` at version ``n`` under a
private name and rewriting the query to use it (Spark's own syntax needs a v2 catalog). The
version is that of the view's own table: ``transactions VERSION AS OF n`` reads version n of
the sweep's table when it exists, the other views version n of ``messages``. A ``version``
for all views pins the ``messages`` table; ``transactions`` is then the derived view at that
version, so one query sees one consistent snapshot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import KIND_NORMAL, KIND_SCHEDULE, KIND_TRANS_HALF, KIND_TRANS_OP, MESSAGES_TABLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["TRANSACTIONS_TABLE", "VIEWS", "lookup_key", "register_views", "rewrite_time_travel", "run_sql"]

TRANSACTIONS_TABLE = "transactions"
VIEWS = ("all_messages", "messages", "schedule_messages", "transactions_half", "transactions_op",
         "transactions_derived", "transactions")

_KIND_VIEWS = {
    "messages": KIND_NORMAL, "schedule_messages": KIND_SCHEDULE,
    "transactions_half": KIND_TRANS_HALF, "transactions_op": KIND_TRANS_OP,
}

_TRANSACTIONS = """
SELECT h.properties['REAL_TOPIC'] AS topic, h.commitlog_offset AS half_offset, h.queue_offset AS half_queue_offset,
       h.msg_id, h.uniq_key, h.keys, h.properties['PGROUP'] AS producer_group, h.born_timestamp,
       h.store_timestamp,
       CASE WHEN c.commit_offset IS NOT NULL THEN 'COMMIT'
            WHEN o.half_queue_offset IS NOT NULL THEN 'ROLLBACK'
            ELSE 'PENDING' END AS state,
       c.commit_offset,
       COALESCE(CAST(h.properties['TRANSACTION_CHECK_TIMES'] AS INT), 0) AS checks
FROM {half} h
LEFT JOIN (SELECT DISTINCT CAST(CAST(body AS STRING) AS BIGINT) AS half_queue_offset FROM {op}) o
  ON o.half_queue_offset = h.queue_offset
LEFT JOIN (SELECT prepared_transaction_offset, MIN(commitlog_offset) AS commit_offset FROM {all}
           WHERE kind = 'normal' AND (sys_flag & 12) = 8 GROUP BY prepared_transaction_offset) c
  ON c.prepared_transaction_offset = h.commitlog_offset
"""

_VERSION_AS_OF = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+VERSION\s+AS\s+OF\s+(\d+)", re.IGNORECASE)


def _reader(spark: SparkSession, lake: LakeLocation, table: str, version: int | None) -> DataFrame:
    reader = (spark.read.format("lakedelta").option("path", lake.table_uri(table))
              .option("storage_options", json.dumps(lake.options)))
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    return reader.load()


def _has_table(lake: LakeLocation, table: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(lake.table_uri(table), storage_options=lake.delta_options()))


def register_views(
    spark: SparkSession, lake_uri: str, *, storage_options: Mapping[str, str] | None = None,
    version: int | None = None, suffix: str = "", transactions_version: int | None = None,
) -> list[str]:
    """Register the lake's views (named ``{view}{suffix}``); returns their names. ``version``
    pins the ``messages`` table, ``transactions_version`` the sweep's ``transactions`` table."""
    lake = LakeLocation.of(lake_uri, storage_options)
    base = _reader(spark, lake, MESSAGES_TABLE, version)
    base.createOrReplaceTempView(f"all_messages{suffix}")
    for view, kind in _KIND_VIEWS.items():
        base.where(base.kind == kind).createOrReplaceTempView(f"{view}{suffix}")
    derived = spark.sql(_TRANSACTIONS.format(half=f"transactions_half{suffix}", op=f"transactions_op{suffix}",
                                             all=f"all_messages{suffix}"))
    derived.createOrReplaceTempView(f"transactions_derived{suffix}")
    swept = (version is None or transactions_version is not None) and _has_table(lake, TRANSACTIONS_TABLE)
    transactions = _reader(spark, lake, TRANSACTIONS_TABLE, transactions_version) if swept else derived
    transactions.createOrReplaceTempView(f"transactions{suffix}")
    return [f"{v}{suffix}" for v in VIEWS]


def rewrite_time_travel(
    spark: SparkSession, lake_uri: str, query: str, *, storage_options: Mapping[str, str] | None = None
) -> str:
    """Replace ``view VERSION AS OF n`` with a view registered at version n."""
    registered: set[str] = set()
    lake = LakeLocation.of(lake_uri, storage_options)

    def swap(match: re.Match[str]) -> str:
        name, version = match.group(1).lower(), int(match.group(2))
        if name not in VIEWS:
            return match.group(0)
        if name == "transactions" and _has_table(lake, TRANSACTIONS_TABLE):
            view = f"transactions__tv{version}"
            if view not in registered:
                _reader(spark, lake, TRANSACTIONS_TABLE, version).createOrReplaceTempView(view)
                registered.add(view)
            return view
        if f"__v{version}" not in registered:
            register_views(spark, lake_uri, storage_options=storage_options, version=version, suffix=f"__v{version}")
            registered.add(f"__v{version}")
        return f"{name}__v{version}"

    return _VERSION_AS_OF.sub(swap, query)


def run_sql(
    spark: SparkSession, lake_uri: str, query: str, *, storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
) -> DataFrame:
    """Run ``query`` against the lake's views (at ``version`` if given)."""
    register_views(spark, lake_uri, storage_options=storage_options, version=version)
    return spark.sql(rewrite_time_travel(spark, lake_uri, query, storage_options=storage_options))


def lookup_key(
    spark: SparkSession, lake_uri: str, *, topic: str, key: str, storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Messages of ``topic`` whose KEYS contain ``key`` or whose UNIQ_KEY is ``key`` (the
    lake's answer to RocketMQ's query by key). The topic filter prunes partitions."""
    register_views(spark, lake_uri, storage_options=storage_options)
    return spark.sql(
        "SELECT * FROM all_messages WHERE topic = :topic "
        "AND (uniq_key = :key OR array_contains(split(keys, ' '), :key)) ORDER BY commitlog_offset",
        args={"topic": topic, "key": key},
    )
