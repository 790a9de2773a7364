"""Spark SQL over the lake, through Delta Lake's own connector and catalog.

Tables (Delta tables registered in the session catalog at their lake locations, when the lake
holds them, so Delta's SQL works on them as a Spark user types it: ``DESCRIBE HISTORY
messages``, ``DESCRIBE DETAIL``, ``messages VERSION AS OF 3`` / ``TIMESTAMP AS OF``,
``OPTIMIZE``, ``VACUUM``, ``MERGE``):

- ``messages``: every CommitLog record tiered, system topics included (``kind`` tells them apart);
- ``transactions``: the table the transaction sweep writes (:mod:`lakemq.jobs.transaction_sweep`);
- ``delay_sweep``: what the delay sweep delivered (:mod:`lakemq.jobs.delay_sweep`);
- ``message_keys``: the lake's IndexFile, one row per key and unique key of a message with its
  store host and CommitLog offset (:mod:`lakemq.jobs.key_index`).

Views over ``messages`` (catalog views, so every session of a Spark Connect server sees them):

- ``user_messages``: user topics only (``kind = 'normal'``);
- ``schedule_messages``: delayed messages waiting in SCHEDULE_TOPIC_XXXX;
- ``timer_messages``: timer messages waiting in rmq_sys_wheel_timer, and recall markers
  (TIMER_DEL_UNIQKEY);
- ``transactions_half`` / ``transactions_op``: the two transaction system topics;
- ``transactions_derived``: one row per half message with its outcome: COMMIT when a message
  with the commit flag points back at it (PREPARED TRANSACTION OFFSET = the half message's
  CommitLog offset), ROLLBACK when only an op record marks it done, else PENDING; and its
  check count (TRANSACTION_CHECK_TIMES). It is also ``transactions`` while the sweep has not
  written its table.

``version`` pins every name to one version of ``messages`` (temporary views over
``versionAsOf``, shadowing the catalog's), so one query sees one snapshot; ``transactions`` is
then the derived view at that version.

``register_live`` (``lakemq sql`` with a name server) makes ``messages`` the live union
instead: a temporary view over the ``lakemq`` source (:mod:`lakemq.jobs.live_source`), the
Delta table and every queue's messages past it on the brokers, planned again by every query,
with the views above as temporary views over it and ``messages_lake`` the Delta table alone.

Jobs use :func:`register_views`: the same names as temporary views with a suffix, so a job
never disturbs the names a user's session has registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakemq.errors import LakeError
from lakemq.jobs.lake_sql import TRANSACTIONS_TABLE, VIEWS, names_live_views
from lakemq.jobs.lake_tables import configure_s3a, read_table, spark_uri, table_exists
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import (
    KEYS_TABLE,
    KIND_NORMAL,
    KIND_SCHEDULE,
    KIND_TRANS_HALF,
    KIND_TRANS_OP,
    KIND_WHEEL_TIMER,
    MESSAGES_TABLE,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakemq.jobs.connect_client import ConnectSession

__all__ = ["DELAY_SWEEP_TABLE", "FILTER_PUSHDOWN", "LAKE_ONLY_VIEW", "LIVE_SOURCE", "TABLES", "TRANSACTIONS_TABLE",
           "VIEWS", "live_view_statements", "names_live_views", "register_live", "register_live_views",
           "register_remote_live_views", "register_tables", "register_views", "run_sql"]

LAKE_ONLY_VIEW = "messages_lake"
DELAY_SWEEP_TABLE = "delay_sweep"
TABLES = (MESSAGES_TABLE, TRANSACTIONS_TABLE, DELAY_SWEEP_TABLE, KEYS_TABLE)

# Python data sources see Spark's filters only with this on (the ``lakemq`` source takes them).
FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
# The ``lakemq`` source's class (lakemq.jobs.sources), as a Spark Connect client registers it on
# its remote session by reference, without importing it (and pyspark) here.
LIVE_SOURCE = ("lakemq", "lakemq.jobs.sources", "LiveDataSource")


_KIND_VIEWS = {
    "user_messages": KIND_NORMAL, "schedule_messages": KIND_SCHEDULE, "timer_messages": KIND_WHEEL_TIMER,
    "transactions_half": KIND_TRANS_HALF, "transactions_op": KIND_TRANS_OP,
}

# Queue and CommitLog offsets are each broker's own: an Op or commit record matches a half
# message of the broker that stored it (same store_host) only.
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
LEFT JOIN (SELECT DISTINCT store_host, CAST(CAST(body AS STRING) AS BIGINT) AS half_queue_offset FROM {op}) o
  ON o.store_host = h.store_host AND o.half_queue_offset = h.queue_offset
LEFT JOIN (SELECT store_host, prepared_transaction_offset, MIN(commitlog_offset) AS commit_offset FROM {all}
           WHERE kind = 'normal' AND (sys_flag & 12) = 8 GROUP BY store_host, prepared_transaction_offset) c
  ON c.store_host = h.store_host AND c.prepared_transaction_offset = h.commitlog_offset
"""


def _view_sql(view: str, suffix: str = "") -> str:
    if view in _KIND_VIEWS:
        return f"SELECT * FROM {MESSAGES_TABLE}{suffix} WHERE kind = '{_KIND_VIEWS[view]}'"
    return _TRANSACTIONS.format(half=f"transactions_half{suffix}", op=f"transactions_op{suffix}",
                                all=f"{MESSAGES_TABLE}{suffix}")


def register_views(
    spark: SparkSession, lake_uri: str, *, storage_options: Mapping[str, str] | None = None,
    version: int | None = None, suffix: str = "", transactions_version: int | None = None,
) -> list[str]:
    """Temporary views ``{name}{suffix}`` of the tables and views above, for a job. ``version``
    pins ``messages``, ``transactions_version`` the sweep's ``transactions`` table."""
    lake = LakeLocation.of(lake_uri, storage_options)
    read_table(spark, lake, MESSAGES_TABLE, version=version).createOrReplaceTempView(f"{MESSAGES_TABLE}{suffix}")
    for view in VIEWS:
        spark.sql(_view_sql(view, suffix)).createOrReplaceTempView(f"{view}{suffix}")
    if (version is None or transactions_version is not None) and table_exists(lake, TRANSACTIONS_TABLE):
        swept = read_table(spark, lake, TRANSACTIONS_TABLE, version=transactions_version)
    else:
        swept = spark.table(f"transactions_derived{suffix}")
    swept.createOrReplaceTempView(f"{TRANSACTIONS_TABLE}{suffix}")
    return [f"{n}{suffix}" for n in (MESSAGES_TABLE, *VIEWS, TRANSACTIONS_TABLE)]


def _catalog(spark: SparkSession, name: str) -> tuple[Any, Any]:
    """(the session catalog, the identifier of ``name`` in its current database)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return spark._jsparkSession.sessionState().catalog(), jvm.org.apache.spark.sql.catalyst.TableIdentifier(name)


def _catalog_kind(spark: SparkSession, name: str) -> str | None:
    """The catalog's entry ``name``: EXTERNAL, MANAGED or VIEW, from its metadata alone. (Spark's
    listTables and DROP TABLE load the Delta table first, and one whose storage is gone, such as
    a stopped S3 endpoint, hangs them.)"""
    catalog, ident = _catalog(spark, name)
    if not catalog.tableExists(ident):
        return None
    return str(catalog.getTableMetadata(ident).tableType().name())


def _drop(spark: SparkSession, name: str) -> None:
    """Remove ``name`` from the catalog: a view, or an external table (for a Delta table that
    is metadata only; its files stay). A managed table is never dropped."""
    kind = _catalog_kind(spark, name)
    if kind in ("VIEW", "EXTERNAL"):
        catalog, ident = _catalog(spark, name)
        catalog.dropTable(ident, True, False)  # ignoreIfNotExists, no purge: metadata only
    elif kind is not None:
        raise LakeError(f"the Spark catalog holds a {kind.lower()} table {name!r}; lakemq will not replace it")


def _attach(spark: SparkSession, name: str, location: str) -> None:
    """Register the Delta table at ``location`` as ``name`` in the catalog (no Delta commit)."""
    key = f"lakemq.catalog.{name}"
    if spark.conf.get(key, "") == location and _catalog_kind(spark, name) == "EXTERNAL":
        return
    _drop(spark, name)
    quoted = location.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"CREATE TABLE `{name}` USING delta LOCATION '{quoted}'")
    spark.conf.set(key, location)


def _ensure_view(spark: SparkSession, name: str, text: str) -> None:
    """``CREATE OR REPLACE VIEW name AS text`` unless the catalog holds that view already: Spark
    analyses the text at every CREATE (half a second for these views), and a session running
    many queries registers the lake before each."""
    catalog, ident = _catalog(spark, name)
    if catalog.tableExists(ident):
        stored = catalog.getTableMetadata(ident)
        if str(stored.tableType().name()) == "VIEW" and stored.viewText().isDefined() \
                and str(stored.viewText().get()).strip() == text.strip():
            return
    spark.sql(f"CREATE OR REPLACE VIEW `{name}` AS {text}")


def register_tables(
    spark: SparkSession, lake_uri: str, *, storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
) -> list[str]:
    """Put the lake's tables and views in the session catalog (see the module docstring);
    returns the names. Raises LakeError when the lake has no ``messages`` table yet."""
    lake = LakeLocation.of(lake_uri, storage_options)
    configure_s3a(spark, lake)
    if not table_exists(lake, MESSAGES_TABLE):
        raise LakeError(f"no Delta table at {lake.table_uri(MESSAGES_TABLE)}: nothing has been tiered into this lake")
    present = [t for t in TABLES if t == MESSAGES_TABLE or table_exists(lake, t)]
    for name in (*TABLES, *VIEWS):
        spark.catalog.dropTempView(name)  # an earlier pinned version
    for table in present:
        _attach(spark, table, spark_uri(lake, table))
    if TRANSACTIONS_TABLE not in present and _catalog_kind(spark, TRANSACTIONS_TABLE) != "VIEW":
        _drop(spark, TRANSACTIONS_TABLE)  # another lake's table (the derived view replaces it below)
        spark.conf.unset(f"lakemq.catalog.{TRANSACTIONS_TABLE}")
    for view in VIEWS:
        _ensure_view(spark, view, _view_sql(view))
    if TRANSACTIONS_TABLE not in present:
        _ensure_view(spark, TRANSACTIONS_TABLE, "SELECT * FROM transactions_derived")
    if version is not None:
        # Temporary views shadow the catalog's names: every name reads the same snapshot.
        read_table(spark, lake, MESSAGES_TABLE, version=version).createOrReplaceTempView(MESSAGES_TABLE)
        for view in VIEWS:
            spark.sql(_view_sql(view)).createOrReplaceTempView(view)
        spark.table("transactions_derived").createOrReplaceTempView(TRANSACTIONS_TABLE)
    return [*present, *VIEWS, *([] if TRANSACTIONS_TABLE in present else [TRANSACTIONS_TABLE])]


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register_live(
    spark: SparkSession, lake_uri: str, namesrv: str, *, storage_options: Mapping[str, str] | None = None,
    allow_stale: bool = False, views: bool = True,
) -> list[str]:
    """:func:`register_tables`, then ``messages`` as the live union (see the module docstring)
    and ``messages_lake`` as the Delta table alone; returns the names. Views are SQL text, so
    each query resolves them again and the source plans a new cut. ``views``: see
    :func:`register_live_views`."""
    names = register_tables(spark, lake_uri, storage_options=storage_options)
    register_live_views(spark, lake_uri, namesrv, storage_options=storage_options, allow_stale=allow_stale,
                        views=views)
    return [*names, LAKE_ONLY_VIEW]


def live_view_statements(
    lake_uri: str, namesrv: str, *, storage_options: Mapping[str, str] | None = None, allow_stale: bool = False,
    views: bool = True,
) -> list[str]:
    """The SQL that makes ``messages`` the live union on a session where the ``lakemq`` source
    is registered (see :func:`register_live_views`)."""
    import json

    lake = LakeLocation.of(lake_uri, storage_options)
    location = spark_uri(lake, MESSAGES_TABLE).replace("`", "``")
    options = {"namesrv": namesrv, "lake": lake.uri, "allowStaleHotTail": str(allow_stale).lower(),
               "storage_options": json.dumps(dict(storage_options or {}))}
    listed = ", ".join(f"{key} {_quote(value)}" for key, value in options.items())
    statements = [f"CREATE OR REPLACE TEMPORARY VIEW {LAKE_ONLY_VIEW} AS SELECT * FROM delta.`{location}`",
                  f"CREATE OR REPLACE TEMPORARY VIEW {MESSAGES_TABLE} USING lakemq OPTIONS ({listed})"]
    if not views:
        return statements
    statements += [f"CREATE OR REPLACE TEMPORARY VIEW {view} AS {_view_sql(view)}" for view in VIEWS]
    if not table_exists(lake, TRANSACTIONS_TABLE):
        statements.append(f"CREATE OR REPLACE TEMPORARY VIEW {TRANSACTIONS_TABLE} AS SELECT * FROM transactions_derived")
    return statements


def register_live_views(
    spark: SparkSession, lake_uri: str, namesrv: str, *, storage_options: Mapping[str, str] | None = None,
    allow_stale: bool = False, views: bool = True,
) -> None:
    """The live half of :func:`register_live`, on a session of this process whose catalog
    already holds the lake's tables: temporary views only (the lake service's clients run the
    same :func:`live_view_statements` on their remote session). Every view over ``messages``
    resolves the ``lakemq`` source when it is created, a Python worker start each (seconds on
    a loaded machine); without ``views`` only ``messages`` and ``messages_lake`` are
    registered, for a statement that names no other view (:func:`names_live_views`): the
    catalog's views would read the Delta table alone."""
    from lakemq.jobs.sources import register_sources

    register_sources(spark)
    for statement in live_view_statements(lake_uri, namesrv, storage_options=storage_options,
                                          allow_stale=allow_stale, views=views):
        spark.sql(statement)


def register_remote_live_views(
    session: ConnectSession, lake_uri: str, namesrv: str, *, storage_options: Mapping[str, str] | None = None,
    allow_stale: bool = False, views: bool = True,
) -> None:
    """:func:`register_live_views` on a session of the lake service through lakemq's own Spark
    Connect client: the ``lakemq`` source registered by a reference to its class
    (:data:`LIVE_SOURCE`), then the same statements."""
    session.register_data_source(*LIVE_SOURCE)
    session.sql(f"SET {FILTER_PUSHDOWN}=true")
    for statement in live_view_statements(lake_uri, namesrv, storage_options=storage_options,
                                          allow_stale=allow_stale, views=views):
        session.sql(statement)


def run_sql(
    spark: SparkSession, lake_uri: str, query: str, *, storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
) -> DataFrame:
    """Run ``query`` against the lake's tables and views (at ``version`` if given)."""
    register_tables(spark, lake_uri, storage_options=storage_options, version=version)
    return spark.sql(query)
