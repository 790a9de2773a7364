"""Transaction sweep: settle transactional half messages across history (lake + hot tier) and
keep the lake's ``transactions`` Delta table, one row per transaction.

A transaction is named by its broker (``store_host``) and the half queue offset of its first
half message (``half_queue_offset``; every copy the check service puts back names it in
TRAN_PREPARED_QUEUE_OFFSET). From the lake's ``messages`` table (Spark SQL):

- COMMIT: a committed message points back at one of its copies (PREPARED TRANSACTION OFFSET =
  the copy's CommitLog offset);
- ROLLBACK: an Op message marks one of its copies done and nothing was committed (the broker
  writes the committed message before the Op message, so a tiered Op message has its commit
  tiered too);
- otherwise it is pending in the lake, and its broker is asked (LAKEMQ_RESUME_HALF_MESSAGES,
  the newest copy the lake holds, see lakemq/broker/transaction/lake_resume.py): an Op message
  in the hot tier resolves it; a copy still in the broker's half queue is left to the check
  service; a copy checked transactionCheckMax times is rolled back now; any other is put back
  into the half queue with its check count + 1 and its producer group is asked (check-back).

States in the table: COMMIT, ROLLBACK, PENDING (waiting on the broker's check rules) and
UNKNOWN (the broker could not be asked or refused; asked again next run). A final state the
broker reported (its own rollback, or an END_TRANSACTION it took) is kept until the lake shows
the same from the tiered records.

Idempotent: the table remembers the check count of the copy last handed back
(``handed_back_checks``); a run hands a transaction back again only when the lake holds a
newer copy (more checks) than that, and the broker itself never puts back a transaction whose
copy is still in its half queue or which its hot op queue resolves. Rows are written by Delta
Lake's MERGE (Spark SQL) on the key, and only rows that changed: a run that learns nothing new
writes no Delta version.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.common.config import bind
from lakemq.common.message import MessageConst
from lakemq.errors import ConfigError, LakeMQError
from lakemq.jobs.lake_tables import read_table, spark_uri, table_exists
from lakemq.jobs.sql import TRANSACTIONS_TABLE, register_views
from lakemq.tiering.config import TransactionSweepConfig
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE, encode_row

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "STATES",
    "TRANSACTIONS_SCHEMA",
    "TRANSACTIONS_TABLE",
    "HandBack",
    "SweepReport",
    "TransactionSweepConfig",
    "run_transaction_sweep",
    "sweep_transactions",
    "transactions_table_exists",
]

_HALF_TOPIC: Final = b"RMQ_SYS_TRANS_HALF_TOPIC"
STATES: Final = ("COMMIT", "ROLLBACK", "PENDING", "UNKNOWN")
_FINAL: Final = ("COMMIT", "ROLLBACK")

TRANSACTIONS_SCHEMA: Final = pa.schema([
    pa.field("store_host", pa.string(), nullable=False),  # the broker that stored the half message
    pa.field("half_queue_offset", pa.int64(), nullable=False),  # of the first copy: the transaction's name
    pa.field("half_offset", pa.int64(), nullable=False),  # CommitLog offset of the first copy
    pa.field("msg_id", pa.string(), nullable=False),  # offset message id of the first copy
    pa.field("uniq_key", pa.string()),  # the transaction id producers see
    pa.field("topic", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("producer_group", pa.string()),
    pa.field("born_timestamp", pa.int64(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
    pa.field("state", pa.string(), nullable=False),
    pa.field("checks", pa.int32(), nullable=False),  # TRANSACTION_CHECK_TIMES, highest known
    pa.field("copies", pa.int32(), nullable=False),  # half message copies in the lake
    pa.field("commit_offset", pa.int64()),  # CommitLog offset of the committed message
    pa.field("resolved_at", pa.int64()),  # store time of the commit / Op message in the lake
    pa.field("handed_back_checks", pa.int32()),  # check count of the copy last handed back
    pa.field("handed_back_at", pa.int64()),
    pa.field("broker_verdict", pa.string()),  # the broker's last answer, with its remark
    pa.field("swept_at", pa.int64(), nullable=False),  # when this row was last written
])
_COMPARED: Final = [f.name for f in TRANSACTIONS_SCHEMA if f.name != "swept_at"]
# Columns taken from the lake as they are (state and checks merge with the table's, see _row).
_FROM_LAKE: Final = ("half_offset", "msg_id", "uniq_key", "topic", "keys", "tags", "producer_group",
                     "born_timestamp", "store_timestamp", "copies", "commit_offset", "resolved_at")

# (broker address, half message records) -> one verdict dict per record (Admin.resume_half_messages).
HandBack = Callable[[str, bytes], list[dict[str, Any]]]
Progress = Callable[[int, int], None]

_HALVES = """
SELECT store_host,
       COALESCE(TRY_CAST(properties['{prepared}'] AS BIGINT), queue_offset) AS origin,
       COALESCE(TRY_CAST(properties['{checks}'] AS INT), 0) AS checks,
       queue_id, queue_offset, commitlog_offset, msg_id, uniq_key, tags, keys, properties, body, flag,
       sys_flag, born_timestamp, born_host, store_timestamp, reconsume_times, prepared_transaction_offset,
       body_crc
FROM transactions_half{s}
"""

_LAKE_TRANSACTIONS = """
WITH ops AS (
  SELECT store_host, TRY_CAST(CAST(body AS STRING) AS BIGINT) AS copy,
         TRY_CAST(properties['{prepared}'] AS BIGINT) AS origin, store_timestamp
  FROM transactions_op{s} WHERE tags = 'd'
),
done AS (
  SELECT h.store_host, h.origin, o.store_timestamp AS at FROM halves{s} h
  JOIN ops o ON o.store_host = h.store_host AND o.copy = h.queue_offset
  UNION ALL
  SELECT store_host, origin, store_timestamp AS at FROM ops WHERE origin IS NOT NULL
),
op AS (SELECT store_host, origin, MIN(at) AS op_at FROM done GROUP BY store_host, origin),
cm AS (
  SELECT h.store_host, h.origin, MIN(m.commitlog_offset) AS commit_offset, MIN(m.store_timestamp) AS commit_at
  FROM halves{s} h JOIN messages{s} m
    ON m.store_host = h.store_host AND m.prepared_transaction_offset = h.commitlog_offset
  WHERE m.kind = 'normal' AND (m.sys_flag & 12) = 8
  GROUP BY h.store_host, h.origin
),
tx AS (
  SELECT store_host, origin, MAX(checks) AS checks, COUNT(*) AS copies,
         MIN_BY(STRUCT(commitlog_offset, msg_id, uniq_key, properties['{real_topic}'] AS topic, keys, tags,
                       properties['{group}'] AS producer_group, born_timestamp, store_timestamp), queue_offset)
           AS first,
         MAX_BY(STRUCT(queue_id, queue_offset, commitlog_offset, properties, body, flag, sys_flag, born_timestamp,
                       born_host, store_timestamp, reconsume_times, prepared_transaction_offset, body_crc),
                STRUCT(checks, queue_offset)) AS latest
  FROM halves{s} GROUP BY store_host, origin
)
SELECT tx.store_host, tx.origin AS half_queue_offset, tx.first.commitlog_offset AS half_offset,
       tx.first.msg_id, tx.first.uniq_key, tx.first.topic, tx.first.keys, tx.first.tags,
       tx.first.producer_group, tx.first.born_timestamp, tx.first.store_timestamp,
       CASE WHEN cm.commit_offset IS NOT NULL THEN 'COMMIT' WHEN op.op_at IS NOT NULL THEN 'ROLLBACK'
            ELSE 'PENDING' END AS lake_state,
       CAST(tx.checks AS INT) AS lake_checks, CAST(tx.copies AS INT) AS copies, cm.commit_offset,
       CASE WHEN cm.commit_offset IS NOT NULL THEN cm.commit_at ELSE op.op_at END AS resolved_at,
       tx.latest
FROM tx
LEFT JOIN cm ON cm.store_host = tx.store_host AND cm.origin = tx.origin
LEFT JOIN op ON op.store_host = tx.store_host AND op.origin = tx.origin
"""


@dataclass(frozen=True, slots=True)
class SweepReport:
    counts: dict[str, int]  # transactions by state, after the run
    pending: list[dict[str, Any]]  # PENDING and UNKNOWN rows (oldest first, up to the report limit)
    asked: int  # transactions handed to their broker
    verdicts: dict[str, int] = field(default_factory=dict)  # the brokers' answers by kind
    written: int = 0  # rows inserted or updated
    table_version: int | None = None
    seconds: float = 0.0


def transactions_table_exists(lake: LakeLocation) -> bool:
    return table_exists(lake, TRANSACTIONS_TABLE)


def _read_table(spark: SparkSession, lake: LakeLocation) -> DataFrame:
    return read_table(spark, lake, TRANSACTIONS_TABLE)


def _candidates(spark: SparkSession, lake: LakeLocation) -> DataFrame:
    """Every lake transaction whose row is new or may change, or whose broker must be asked."""
    s = "_txsweep"
    register_views(spark, lake.uri, storage_options=lake.options, suffix=s)
    names = {
        "s": s,
        "prepared": MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET,
        "checks": MessageConst.TRANSACTION_CHECK_TIMES,
        "real_topic": MessageConst.REAL_TOPIC,
        "group": MessageConst.PRODUCER_GROUP,
    }
    spark.sql(_HALVES.format(**names)).createOrReplaceTempView(f"halves{s}")
    lake_tx = spark.sql(_LAKE_TRANSACTIONS.format(**names))
    if transactions_table_exists(lake):
        existing = _read_table(spark, lake)
    else:
        existing = spark.createDataFrame([], _spark_schema())
    lake_tx.createOrReplaceTempView(f"lake_tx{s}")
    existing.createOrReplaceTempView(f"tx_table{s}")
    final = ", ".join(f"'{x}'" for x in _FINAL)
    # Only rows that are new, may change or must be asked leave Spark: in a steady state that
    # is a handful, however long the history (Python still compares each one exactly).
    same = " AND ".join(f"l.{c} <=> e.{c}" for c in _FROM_LAKE)
    return spark.sql(f"""
    SELECT * FROM (
      SELECT l.*, e.state AS e_state, e.checks AS e_checks, e.handed_back_checks AS e_handed_back_checks,
             e.handed_back_at AS e_handed_back_at, e.broker_verdict AS e_broker_verdict,
             to_json(struct(e.*)) AS e_row,
             l.lake_state = 'PENDING' AND COALESCE(e.state NOT IN ({final}), TRUE)
               AND NOT COALESCE(e.handed_back_checks >= l.lake_checks, FALSE) AS ask,
             e.state IS NULL OR NOT ({same}) OR GREATEST(l.lake_checks, e.checks) <> e.checks
               OR (l.lake_state IN ({final}) AND l.lake_state <> e.state) AS may_change
      FROM lake_tx{s} l LEFT JOIN tx_table{s} e
        ON e.store_host = l.store_host AND e.half_queue_offset = l.half_queue_offset
    ) WHERE ask OR may_change
    """)


def _spark_schema() -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(TRANSACTIONS_SCHEMA)


def _row(c: Mapping[str, Any], now: int) -> dict[str, Any]:
    """The table row the lake alone implies, with what the table already knew carried over."""
    state = c["lake_state"]
    if state == "PENDING":
        state = c["e_state"] or "PENDING"
    return {
        "store_host": c["store_host"],
        "half_queue_offset": c["half_queue_offset"],
        "half_offset": c["half_offset"],
        "msg_id": c["msg_id"],
        "uniq_key": c["uniq_key"],
        "topic": c["topic"],
        "keys": c["keys"],
        "tags": c["tags"],
        "producer_group": c["producer_group"],
        "born_timestamp": c["born_timestamp"],
        "store_timestamp": c["store_timestamp"],
        "state": state,
        "checks": max(c["lake_checks"], c["e_checks"] or 0),
        "copies": c["copies"],
        "commit_offset": c["commit_offset"],
        "resolved_at": c["resolved_at"],
        "handed_back_checks": c["e_handed_back_checks"],
        "handed_back_at": c["e_handed_back_at"],
        "broker_verdict": c["e_broker_verdict"],
        "swept_at": now,
    }


def _record(latest: Mapping[str, Any], store_host: str) -> bytes:
    """The newest lake copy as the CommitLog record it was (offsets and store time kept)."""
    return encode_row(_HALF_TOPIC, latest, dict(latest["properties"] or {}), store_host)


def _apply(row: dict[str, Any], lake_checks: int, verdict: Mapping[str, Any], now: int) -> str:
    """Fold one broker verdict into ``row``; returns the verdict's kind."""
    kind = str(verdict.get("verdict", "refused"))
    remark = str(verdict.get("remark") or "")
    outcome = str(verdict.get("outcome") or "")
    row["broker_verdict"] = f"{kind}: {remark}" if remark else kind
    row["checks"] = max(row["checks"], int(verdict.get("checks") or 0))
    if kind == "checking":
        row["state"] = "PENDING"
        row["handed_back_checks"], row["handed_back_at"] = lake_checks, now
    elif kind in ("resolved", "rolled_back") and outcome in ("commit", "rollback"):
        row["state"] = "COMMIT" if outcome == "commit" else "ROLLBACK"
    elif kind in ("resolved", "in_half_queue"):
        row["state"] = "PENDING"
    else:
        row["state"] = "UNKNOWN"
    return kind


def _changed(row: Mapping[str, Any], c: Mapping[str, Any]) -> bool:
    if c["e_state"] is None:  # no row yet (state is never null in the table)
        return True
    old = json.loads(c["e_row"])
    return any(row[k] != old.get(k) for k in _COMPARED)


def _ask_brokers(
    asks: list[tuple[dict[str, Any], Mapping[str, Any]]],
    hand_back: HandBack,
    brokers: set[str],
    batch: int,
    now: int,
    verdicts: dict[str, int],
    progress: Progress | None,
) -> None:
    by_host: dict[str, list[tuple[dict[str, Any], Mapping[str, Any]]]] = {}
    for row, c in asks:
        by_host.setdefault(row["store_host"], []).append((row, c))
    done = 0
    for host, items in sorted(by_host.items()):
        # In half-queue order, as a broker's own check service walks it, whatever order Spark
        # returned the candidates in.
        items.sort(key=lambda item: item[0]["half_queue_offset"])
        for i in range(0, len(items), batch):
            chunk = items[i : i + batch]
            if host not in brokers:
                answers: Sequence[Mapping[str, Any]] = [
                    {"verdict": "unreachable", "remark": f"broker {host} is not a master of the cluster"}
                ] * len(chunk)
            else:
                try:
                    answers = hand_back(host, b"".join(_record(c["latest"], host) for _, c in chunk))
                except (LakeMQError, OSError) as exc:
                    answers = [{"verdict": "unreachable", "remark": str(exc)}] * len(chunk)
                if len(answers) != len(chunk):
                    answers = [{"verdict": "refused", "remark": "the broker's answer does not match"}] * len(chunk)
            for (row, c), answer in zip(chunk, answers):
                kind = _apply(row, c["lake_checks"], answer, now)
                verdicts[kind] = verdicts.get(kind, 0) + 1
            done += len(chunk)
            if progress is not None:
                progress(done, len(asks))


def _write(spark: SparkSession, lake: LakeLocation, rows: Sequence[Mapping[str, Any]]) -> int:
    """Write the changed rows with Delta's MERGE on the key (the first run creates the table);
    returns the table's version after the write."""
    names = TRANSACTIONS_SCHEMA.names
    data = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], _spark_schema())
    uri = spark_uri(lake, TRANSACTIONS_TABLE)
    if not transactions_table_exists(lake):
        data.write.format("delta").mode("errorifexists").save(uri)
    else:
        source = f"transaction_sweep_rows_{uuid.uuid4().hex}"
        data.createOrReplaceTempView(source)
        try:
            spark.sql(f"""
            MERGE INTO delta.`{uri}` t USING {source} s
            ON t.store_host = s.store_host AND t.half_queue_offset = s.half_queue_offset
            WHEN MATCHED THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *
            """)
        finally:
            spark.catalog.dropTempView(source)
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]["version"])


def _report(spark: SparkSession, lake: LakeLocation, limit: int) -> tuple[dict[str, int], list[dict[str, Any]]]:
    if not transactions_table_exists(lake):
        return {}, []
    table = _read_table(spark, lake)
    counts = {r["state"]: int(r["n"]) for r in table.groupBy("state").count().withColumnRenamed("count", "n").collect()}
    pending = [
        r.asDict()
        for r in table.where(table.state.isin("PENDING", "UNKNOWN"))
        .orderBy("born_timestamp", "half_queue_offset")
        .limit(limit)
        .collect()
    ]
    return counts, pending


def sweep_transactions(
    spark: SparkSession,
    *,
    lake_uri: str,
    hand_back: HandBack,
    brokers: set[str],
    batch: int = 256,
    storage_options: Mapping[str, str] | None = None,
    report_limit: int = 50,
    progress: Progress | None = None,
) -> SweepReport:
    """One sweep: ``brokers`` are the master addresses the cluster has now (a half message of
    any other broker cannot be handed back and ends UNKNOWN). Each broker gets its half
    messages in half-queue order, ``batch`` at a time."""
    began = time.monotonic()
    lake = LakeLocation.of(lake_uri, storage_options)
    if not table_exists(lake, MESSAGES_TABLE):
        return SweepReport({}, [], 0, seconds=time.monotonic() - began)  # nothing tiered yet
    now = int(time.time() * 1000)
    rows: list[tuple[dict[str, Any], Mapping[str, Any]]] = []
    asks: list[tuple[dict[str, Any], Mapping[str, Any]]] = []
    for c in _iter_rows(_candidates(spark, lake)):
        row = _row(c, now)
        rows.append((row, c))
        if c["ask"]:
            asks.append((row, c))
    verdicts: dict[str, int] = {}
    _ask_brokers(asks, hand_back, brokers, batch, now, verdicts, progress)
    changed = [row for row, c in rows if _changed(row, c)]
    version = _write(spark, lake, changed) if changed else None
    counts, pending = _report(spark, lake, report_limit)
    return SweepReport(counts, pending, len(asks), verdicts, len(changed), version, time.monotonic() - began)


def _iter_rows(df: DataFrame) -> Iterator[dict[str, Any]]:
    for r in df.toLocalIterator():
        d = r.asDict()
        latest = d["latest"]
        d["latest"] = latest.asDict() if latest is not None else None
        yield d


def run_transaction_sweep(values: Mapping[str, Any], *, progress: Progress | None = None) -> dict[str, Any]:
    """The sweep for schedulers and the CLI, with settings as a mapping: ``lake_uri`` (else the
    conf's ``lakeUri``),
    ``namesrv``, ``broker_conf`` / ``conf`` (transactionSweepBatch), ``storage_options``,
    ``master``, ``access_key`` / ``secret_key`` (an admin account when the brokers run ACL;
    default $LAKEMQ_ACCESS_KEY / $LAKEMQ_SECRET_KEY), ``report_limit``."""
    import asyncio
    import os

    from pyspark.sql import SparkSession

    from lakemq.client.admin import Admin
    from lakemq.client.sync import background_loop
    from lakemq.jobs.session import build_session

    known = {"lake_uri", "namesrv", "broker_conf", "conf", "storage_options", "master", "access_key",
             "secret_key", "report_limit"}
    if set(values) - known:
        raise ConfigError(f"unknown transaction sweep setting(s): {', '.join(sorted(set(values) - known))}")
    if not values.get("namesrv"):
        raise ConfigError("the transaction sweep needs namesrv")
    props = read_broker_conf(values.get("broker_conf") or None, values.get("conf"))
    config = bind(TransactionSweepConfig, props)
    options = {str(k): str(v) for k, v in (values.get("storage_options") or {}).items()}
    lake_uri = LakeLocation.of(str(values.get("lake_uri") or props.get("lakeUri") or ""), options).uri
    loop = background_loop()

    async def make() -> Admin:
        return Admin(values["namesrv"],
                     access_key=values.get("access_key") or os.environ.get("LAKEMQ_ACCESS_KEY", ""),
                     secret_key=values.get("secret_key") or os.environ.get("LAKEMQ_SECRET_KEY", ""))

    admin = asyncio.run_coroutine_threadsafe(make(), loop).result()
    owned = SparkSession.getActiveSession() is None
    spark = None
    try:
        # The cluster first: a name server that cannot be reached fails the run before Spark starts.
        brokers = set(asyncio.run_coroutine_threadsafe(admin.masters(), loop).result(60).values())
        spark = build_session(master=values.get("master") or None, app_name="lakemq-transaction-sweep")

        def hand_back(addr: str, records: bytes) -> list[dict[str, Any]]:
            return asyncio.run_coroutine_threadsafe(admin.resume_half_messages(addr, records), loop).result(120)

        report = sweep_transactions(
            spark,
            lake_uri=lake_uri,
            hand_back=hand_back,
            brokers=brokers,
            batch=config.transaction_sweep_batch,
            storage_options=options,
            report_limit=int(values.get("report_limit") or 50),
            progress=progress,
        )
    finally:
        asyncio.run_coroutine_threadsafe(admin.__aexit__(None, None, None), loop).result(30)
        if owned and spark is not None:
            spark.stop()
    return {
        "counts": report.counts,
        "pending": report.pending,
        "asked": report.asked,
        "verdicts": report.verdicts,
        "written": report.written,
        "table_version": report.table_version,
        "seconds": round(report.seconds, 3),
    }
