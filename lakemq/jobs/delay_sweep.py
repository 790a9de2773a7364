"""Delay sweep: deliver due delayed messages that only the lake can still deliver.

Three kinds of rows qualify once their delivery time has passed:

- ``schedule``: a delayed message in SCHEDULE_TOPIC_XXXX (delivery time = store time + the
  delay of its level, level = queue id + 1) with no copy in its REAL_TOPIC (same born time,
  born host, body CRC and UNIQ_KEY), e.g. a delay longer than the hot tier keeps files. Only
  rows due at least ``grace_ms`` ago are taken: before that the broker's own schedule service
  may still deliver them. The copy keeps the message's UNIQ_KEY, as the broker's re-put does;
- ``wheel``: a timer message in rmq_sys_wheel_timer (due time TIMER_OUT_MS, see
  lakemq.store.timer) with no copy in its REAL_TOPIC (same UNIQ_KEY and TIMER_OUT_MS) and not
  recalled (no marker whose TIMER_DEL_UNIQKEY names it), e.g. a delay longer than the hot tier
  keeps files; due at least ``grace_ms`` ago, as ``schedule``. The copy keeps its UNIQ_KEY and
  TIMER_OUT_MS, as the broker's timer's does, so either finds the other's copy;
- ``timer``: a user-topic message whose ``__STARTDELIVERTIME`` lay in the future when it was
  stored (the broker does not hold such messages back). The copy drops the property, gets
  ORIGIN_MESSAGE_ID = the original id and a UNIQ_KEY derived from the source offset id.

Exactly once: every delivery is recorded in the lake's ``delay_sweep`` Delta table keyed on
the source message's offset id (store host + CommitLog offset), appended after each
acknowledged batch; rows already there are never sent again. A run that died between a send
and its record is caught by the second guard: before sending, each message's UNIQ_KEY is
looked up in its target topic on the broker (QUERY_MESSAGE by unique key), and one found is
only recorded. Bodies go out uncompressed (the producer compresses again as configured).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.common.compression import decompress_body
from lakemq.common.config import bind
from lakemq.common.message import Message, MessageConst
from lakemq.errors import ConfigError
from lakemq.jobs.broker_lookup import FoundAtBroker, broker_lookup
from lakemq.jobs.lake_tables import read_table, table_exists
from lakemq.jobs.sql import DELAY_SWEEP_TABLE, register_views
from lakemq.store.config import StoreConfig
from lakemq.store.delay_levels import DelayLevels
from lakemq.tiering.config import DelaySweepConfig
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import MESSAGES_TABLE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "OUTCOME_SCHEMA",
    "OUTCOME_TABLE",
    "DelaySweepConfig",
    "DueMessage",
    "SweepResult",
    "find_due",
    "run_sweep",
    "sweep",
]

OUTCOME_TABLE = DELAY_SWEEP_TABLE
OUTCOME_SCHEMA = pa.schema(
    [
        pa.field("source_msg_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("target_topic", pa.string(), nullable=False),
        pa.field("uniq_key", pa.string(), nullable=False),
        pa.field("deliver_at", pa.int64(), nullable=False),
        pa.field("recorded_at", pa.int64(), nullable=False),
        pa.field("sent", pa.bool_(), nullable=False),  # False: found already at the broker, only recorded
    ]
)

_DROP = {
    "schedule": (MessageConst.DELAY_TIME_LEVEL, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID),
    "wheel": (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID),
    "timer": (MessageConst.START_DELIVER_TIME,),
}

SendBatch = Callable[[Sequence[Message]], object]


@dataclass(frozen=True, slots=True)
class DueMessage:
    source_msg_id: str
    kind: str  # "schedule", "wheel" or "timer"
    message: Message  # what to send: target topic, body, flag, properties with its UNIQ_KEY
    deliver_at: int

    @property
    def uniq_key(self) -> str:
        return self.message.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]


@dataclass(frozen=True, slots=True)
class SweepResult:
    due: int  # due and not in the outcome table
    sent: int
    found: int  # already at the broker (a run died after sending): recorded, not sent
    seconds: float


def _derived_uniq(source_msg_id: str) -> str:
    return hashlib.sha1(f"delay-sweep:{source_msg_id}".encode()).hexdigest()[:32].upper()


def _outcome_uri(lake: LakeLocation) -> str:
    return lake.table_uri(OUTCOME_TABLE)


def _outcome_exists(lake: LakeLocation) -> bool:
    return table_exists(lake, OUTCOME_TABLE)


def _due_rows(
    spark: SparkSession, lake: LakeLocation, now_ms: int, grace_ms: int, levels: DelayLevels
) -> Any:
    register_views(spark, lake.uri, storage_options=lake.options, suffix="_sweep")
    delays = ", ".join(f"CAST({d} AS BIGINT)" for d in levels.delays_ms)
    delay = f"element_at(array({delays}), least(s.queue_id + 1, {levels.max_level}))"
    start = f"CAST(m.properties['{MessageConst.START_DELIVER_TIME}'] AS BIGINT)"
    real, out, deleted = (f"w.properties['{MessageConst.REAL_TOPIC}']", f"w.properties['{MessageConst.TIMER_OUT_MS}']",
                          f"properties['{MessageConst.TIMER_DEL_UNIQKEY}']")
    query = f"""
    SELECT * FROM (
      SELECT s.msg_id, 'schedule' AS kind, s.properties['{MessageConst.REAL_TOPIC}'] AS target, s.body,
             s.sys_flag, s.flag, s.properties, s.uniq_key, s.store_timestamp + {delay} AS deliver_at
      FROM schedule_messages_sweep s
      LEFT ANTI JOIN user_messages_sweep r
        ON r.topic = s.properties['{MessageConst.REAL_TOPIC}'] AND r.born_timestamp = s.born_timestamp
       AND r.born_host = s.born_host AND r.body_crc = s.body_crc AND r.uniq_key <=> s.uniq_key
    ) WHERE deliver_at <= {int(now_ms - grace_ms)}
    UNION ALL
    SELECT w.msg_id, 'wheel' AS kind, {real} AS target, w.body, w.sys_flag, w.flag, w.properties, w.uniq_key,
           CAST({out} AS BIGINT) AS deliver_at
    FROM timer_messages_sweep w
    LEFT ANTI JOIN user_messages_sweep r
      ON r.topic = {real} AND r.uniq_key <=> w.uniq_key AND r.properties['{MessageConst.TIMER_OUT_MS}'] = {out}
    LEFT ANTI JOIN (SELECT {deleted} AS del_key FROM timer_messages_sweep WHERE {deleted} IS NOT NULL) d
      ON d.del_key = concat({real}, '+', w.uniq_key)
    WHERE w.{deleted} IS NULL AND CAST({out} AS BIGINT) <= {int(now_ms - grace_ms)}
    UNION ALL
    SELECT m.msg_id, 'timer' AS kind, m.topic AS target, m.body, m.sys_flag, m.flag, m.properties, m.uniq_key,
           {start} AS deliver_at
    FROM user_messages_sweep m
    WHERE {start} > m.store_timestamp AND {start} <= {int(now_ms)}
    """
    # Plain integers: named parameters were left unbound here under Spark 4.2 with Delta's relations.
    due = spark.sql(query)
    if _outcome_exists(lake):
        done = read_table(spark, lake, OUTCOME_TABLE)
        due = due.join(done, due.msg_id == done.source_msg_id, "left_anti")
    return due.orderBy("deliver_at", "msg_id")


def _to_due(row: Any) -> DueMessage:
    kind = row["kind"]
    props = {k: v for k, v in (row["properties"] or {}).items() if k not in _DROP[kind]}
    if kind == "timer" or not row["uniq_key"]:
        props[MessageConst.ORIGIN_MESSAGE_ID] = row["uniq_key"] or row["msg_id"]
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = _derived_uniq(row["msg_id"])
    body = bytes(row["body"] or b"")
    body = decompress_body(body, row["sys_flag"])
    return DueMessage(
        row["msg_id"], kind, Message(row["target"], body, row["flag"], props), row["deliver_at"]
    )


def find_due(
    spark: SparkSession,
    lake_uri: str,
    *,
    now_ms: int,
    grace_ms: int = 10 * 60_000,
    levels: DelayLevels | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Iterator[DueMessage]:
    """Due messages not yet in the outcome table, oldest delivery time first."""
    lake = LakeLocation.of(lake_uri, storage_options)
    if not table_exists(lake, MESSAGES_TABLE):
        return  # nothing tiered yet: nothing to sweep
    levels = levels or DelayLevels(StoreConfig().message_delay_level)
    for row in _due_rows(spark, lake, now_ms, grace_ms, levels).toLocalIterator():
        yield _to_due(row)


def _record(lake: LakeLocation, done: Sequence[tuple[DueMessage, bool]]) -> None:
    from deltalake import write_deltalake

    now = int(time.time() * 1000)
    rows = [
        {
            "source_msg_id": d.source_msg_id,
            "kind": d.kind,
            "target_topic": d.message.topic,
            "uniq_key": d.uniq_key,
            "deliver_at": d.deliver_at,
            "recorded_at": now,
            "sent": sent,
        }
        for d, sent in done
    ]
    write_deltalake(
        _outcome_uri(lake),
        pa.Table.from_pylist(rows, schema=OUTCOME_SCHEMA),
        mode="append",
        storage_options=lake.delta_options(),
    )


def sweep(
    spark: SparkSession,
    *,
    lake_uri: str,
    send_batch: SendBatch,
    found_at_broker: FoundAtBroker,
    now_ms: int | None = None,
    grace_ms: int = 10 * 60_000,
    batch: int = 32,
    levels: DelayLevels | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> SweepResult:
    """Deliver every message due by ``now_ms`` (default: now) that was not delivered before.
    ``send_batch`` gets messages of one topic at a time."""
    began = time.monotonic()
    lake = LakeLocation.of(lake_uri, storage_options)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    pending: dict[str, list[DueMessage]] = {}
    due = sent = found = 0

    def flush(topic: str) -> None:
        nonlocal sent, found
        group = pending.pop(topic)
        at_broker = [found_at_broker(topic, d.uniq_key) for d in group]
        already = [d for d, hit in zip(group, at_broker) if hit]
        to_send = [d for d, hit in zip(group, at_broker) if not hit]
        if to_send:
            send_batch([d.message for d in to_send])
        _record(lake, [(d, True) for d in to_send] + [(d, False) for d in already])
        sent, found = sent + len(to_send), found + len(already)

    for item in find_due(
        spark, lake_uri, now_ms=now, grace_ms=grace_ms, levels=levels, storage_options=storage_options
    ):
        due += 1
        pending.setdefault(item.message.topic, []).append(item)
        if len(pending[item.message.topic]) >= batch:
            flush(item.message.topic)
    for topic in list(pending):
        flush(topic)
    return SweepResult(due, sent, found, time.monotonic() - began)


def run_sweep(values: Mapping[str, Any], *, now_ms: int | None = None) -> dict[str, Any]:
    """The sweep for schedulers, with settings as a mapping: ``lake_uri`` (else the conf's
    ``lakeUri``), ``namesrv``,
    ``broker_conf`` (for messageDelayLevel), ``conf`` (camelCase overrides, including
    delaySweepGraceMs and delaySweepBatch), ``storage_options``, ``master``."""
    from pyspark.sql import SparkSession

    from lakemq.client import SyncProducer
    from lakemq.jobs.session import build_session

    known = {"lake_uri", "namesrv", "broker_conf", "conf", "storage_options", "master"}
    if set(values) - known:
        raise ConfigError(f"unknown delay sweep setting(s): {', '.join(sorted(set(values) - known))}")
    if not values.get("namesrv"):
        raise ConfigError("the delay sweep needs namesrv")
    props = read_broker_conf(values.get("broker_conf") or None, values.get("conf"))
    config = bind(DelaySweepConfig, props)
    levels = DelayLevels(bind(StoreConfig, props).message_delay_level)
    options = {str(k): str(v) for k, v in (values.get("storage_options") or {}).items()}
    lake_uri = LakeLocation.of(str(values.get("lake_uri") or props.get("lakeUri") or ""), options).uri
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master=values.get("master") or None, app_name="lakemq-delay-sweep")
    try:
        with (
            SyncProducer("lakemq_delay_sweep", namesrv_addr=values["namesrv"]) as producer,
            broker_lookup(values["namesrv"]) as found,
        ):

            def send(msgs: Sequence[Message]) -> None:
                if msgs[0].topic.startswith("%RETRY%"):  # retry topics take no batches
                    for m in msgs:
                        producer.send(m)
                else:
                    producer.send_batch(msgs)

            result = sweep(
                spark,
                lake_uri=lake_uri,
                send_batch=send,
                found_at_broker=found,
                now_ms=now_ms,
                grace_ms=config.delay_sweep_grace_ms,
                batch=config.delay_sweep_batch,
                levels=levels,
                storage_options=options,
            )
    finally:
        if owned:
            spark.stop()
    return {
        "due": result.due,
        "sent": result.sent,
        "found": result.found,
        "seconds": round(result.seconds, 3),
    }
