"""The ``message_keys`` table: created, filled for what ``messages`` held before it, and
committed to by every compaction.

Exactly once, as ``messages``: a compaction commits each segment range's key files in one
commit carrying the app transaction (broker, range end) just before the range's message
files (:mod:`lakemq.jobs.compact`), and skips that commit when the table's transaction
version already covers the range (a run that died between the two commits).

A lake tiered before the table existed gets it filled once, in one commit with the app
transaction ``BACKFILL_APP`` = the ``messages`` version it indexed; a lake created with it
gets that transaction in an empty commit. Until the transaction is there, look-ups by key
scan ``messages`` instead (:func:`index_complete`), so a fill that died half-way is never
read and is run again by the next compaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakemq.errors import LakeError
from lakemq.jobs.lake_tables import read_table, spark_uri, table_exists
from lakemq.tiering.damage import reading_table
from lakemq.tiering.delta_log import make_log_durable
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.table_handles import TableHandles
from lakemq.tiering.tables import (
    KEY_TYPE_KEY,
    KEY_TYPE_UNIQ,
    KEYS_DATA_SCHEMA,
    KEYS_PARTITION_COLUMNS,
    KEYS_SCHEMA,
    KEYS_TABLE,
    MESSAGES_TABLE,
    META_BROKER,
    META_RANGE_END,
    META_RANGE_START,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    # Only a type here: seal imports numpy, which admin message query's look-up does not need.
    from lakemq.tiering.seal import SealedSegment

__all__ = ["BACKFILL_APP", "commit_key_files", "ensure_key_index", "index_complete", "indexed_offsets"]

log = logging.getLogger(__name__)

BACKFILL_APP = "lakemq.message_keys.backfill"


def _open(lake: LakeLocation, table: str) -> Any:
    from deltalake import DeltaTable

    with reading_table(lake, table):
        return DeltaTable(lake.table_uri(table), storage_options=lake.delta_options())


def index_complete(lake: LakeLocation) -> bool:
    """Whether ``message_keys`` holds the keys of every message ``messages`` held when it was
    filled (and compactions have kept it up since)."""
    return _complete_index(lake) is not None


def _complete_index(lake: LakeLocation) -> Any:
    """``message_keys``'s ``deltalake.DeltaTable`` if the index is complete, else None."""
    if not table_exists(lake, KEYS_TABLE):
        return None
    table = _open(lake, KEYS_TABLE)
    return table if table.transaction_version(BACKFILL_APP) is not None else None


def indexed_offsets(lake: LakeLocation, topics: frozenset[str] | None, keys: frozenset[str]) -> list[int] | None:
    """The sorted CommitLog offsets of the messages ``message_keys`` lists under ``keys`` (keys
    from KEYS, in ``topics``: None for every topic), or None while the index is not complete.

    A ``messages`` file whose offset statistics hold none of them holds no message with one of
    those keys, in any snapshot read before this call: a compaction commits a range's keys
    before the range's messages. Offsets of two brokers may coincide; that only keeps a file."""
    import pyarrow.compute as pc

    from lakemq.tiering.table_files import snapshot_actions, table_dataset

    table = _complete_index(lake)  # one snapshot both says the index is complete and lists its files
    if table is None:
        return None
    low, high = min(keys), max(keys)

    def may_hold(add: Mapping[str, Any]) -> bool:
        first, last = add.get("min.key"), add.get("max.key")
        return ((topics is None or add["partition.topic"] in topics)
                and (first is None or first <= high) and (last is None or low <= last))

    with reading_table(lake, KEYS_TABLE):
        actions = snapshot_actions(table)
    data = table_dataset(lake, KEYS_TABLE, KEYS_DATA_SCHEMA, may_hold, actions)
    if data is None:
        return []
    cond = pc.field("key").isin(sorted(keys)) & (pc.field("key_type") == KEY_TYPE_KEY)
    found = data.to_table(columns=["commitlog_offset"], filter=cond).column("commitlog_offset").to_pylist()
    return sorted(set(found))


def _commit(lake: LakeLocation, keys: Any, actions: list[Any], app: str, version: int, metadata: dict[str, str]) -> None:
    """Commit to ``message_keys`` through ``keys``, a handle at its newest version."""
    from deltalake import Schema
    from deltalake.transaction import CommitProperties, Transaction

    keys.create_write_transaction(
        actions, mode="append", schema=Schema.from_arrow(KEYS_SCHEMA), partition_by=list(KEYS_PARTITION_COLUMNS),
        commit_properties=CommitProperties(custom_metadata=metadata,
                                           app_transactions=[Transaction(app, version, int(time.time() * 1000))]),
    )
    make_log_durable(lake, KEYS_TABLE)


def ensure_key_index(spark: SparkSession, lake: LakeLocation, *, checkpoint_interval: int = 10) -> bool:
    """Create ``message_keys`` if missing and fill it with the keys of what ``messages`` holds
    if it was never filled; whether it filled rows."""
    from deltalake import DeltaTable, Schema

    DeltaTable.create(
        lake.table_uri(KEYS_TABLE), Schema.from_arrow(KEYS_SCHEMA), mode="ignore",
        partition_by=list(KEYS_PARTITION_COLUMNS), name=KEYS_TABLE,
        description="lakemq's index of message keys and unique keys into the messages table",
        configuration={"delta.checkpointInterval": str(checkpoint_interval)},
        storage_options=lake.delta_options(),
    )
    make_log_durable(lake, KEYS_TABLE)
    if index_complete(lake):
        return False
    messages = _open(lake, MESSAGES_TABLE)
    version = int(messages.version())
    if not messages.file_uris():
        _commit(lake, _open(lake, KEYS_TABLE), [], BACKFILL_APP, version, {"lakemq.operation": "create"})
        return False
    log.info("filling %s from %s version %d", KEYS_TABLE, MESSAGES_TABLE, version)
    rows = read_table(spark, lake, MESSAGES_TABLE, version=version).selectExpr(
        "topic", "keys", "uniq_key", "store_host", "commitlog_offset", "store_timestamp")
    rows.createOrReplaceTempView("lakemq_keys_fill")
    index = spark.sql(f"""
        SELECT topic, key, '{KEY_TYPE_KEY}' AS key_type, store_host, commitlog_offset, store_timestamp
        FROM lakemq_keys_fill LATERAL VIEW explode(split(keys, ' ')) AS key WHERE key != ''
        UNION ALL
        SELECT topic, uniq_key AS key, '{KEY_TYPE_UNIQ}' AS key_type, store_host, commitlog_offset, store_timestamp
        FROM lakemq_keys_fill WHERE uniq_key IS NOT NULL""")
    # Spark's Delta writer keeps the fill idempotent by itself: txnVersion at or below the
    # table's version of txnAppId makes the write a no-op.
    (index.repartition("topic").sortWithinPartitions("topic", "key", "commitlog_offset")
     .write.format("delta").mode("append")
     .option("txnAppId", BACKFILL_APP).option("txnVersion", version)
     .option("userMetadata", f"lakemq: keys of {MESSAGES_TABLE} version {version}")
     .save(spark_uri(lake, KEYS_TABLE)))
    spark.catalog.dropTempView("lakemq_keys_fill")
    if not index_complete(lake):
        raise LakeError(f"filling {KEYS_TABLE} from {MESSAGES_TABLE} version {version} committed nothing")
    return True


def commit_key_files(lake: LakeLocation, broker: str, seal: SealedSegment, files: list[dict[str, Any]],
                     handles: TableHandles) -> bool:
    """Commit one segment range's key files; False when the range's keys were committed
    already (by a run that died before committing its messages, or a concurrent one)."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction

    if not files:
        return False
    keys = handles.fresh(KEYS_TABLE)
    if (keys.transaction_version(broker) or -1) >= seal.range_end:
        return False
    actions = [
        AddAction(path=f["path"], size=int(f["size"]), partition_values={"topic": f["topic"]},
                  modification_time=int(f["modification_time"]), data_change=True, stats=f["stats"])
        for f in files
    ]
    try:
        _commit(lake, keys, actions, broker, seal.range_end,
                {META_BROKER: broker, META_RANGE_START: str(seal.range_start), META_RANGE_END: str(seal.range_end)})
    except CommitFailedError as exc:
        if (handles.fresh(KEYS_TABLE).transaction_version(broker) or -1) >= seal.range_end:
            return False
        raise LakeError(f"Delta commit of the keys of [{seal.range_start}, {seal.range_end}) failed: {exc}") from exc
    return True
