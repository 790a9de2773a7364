"""Replay: re-produce a topic's history from the lake into a topic, through a broker.

Rows of the ``messages`` view with ``store_timestamp`` in [begin, end] are read in
(store_timestamp, commitlog_offset) order. They go out in batches with the same body, flag,
keys, tags and user properties, and with ORIGIN_MESSAGE_ID set to the original message id
(the UNIQ_KEY its producer was given).
System properties such as UNIQ_KEY, DELAY and the retry and transaction markers are dropped.

A checkpoint file records the last (store_timestamp, commitlog_offset) sent, and is written
after each acknowledged batch. A run that dies resumes after the last batch it sent, so a
re-run neither sends a batch twice nor skips one. The one exception is the batch in flight when
the process died: it may have been stored before its acknowledgement came back.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakemq.common.message import Message, MessageConst
from lakemq.jobs.sql import register_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ReplayResult", "replay", "SYSTEM_PROPERTIES"]

SYSTEM_PROPERTIES = frozenset({
    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.DELAY_TIME_LEVEL, MessageConst.WAIT_STORE_MSG_OK,
    MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.RETRY_TOPIC,
    MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP, MessageConst.MIN_OFFSET,
    MessageConst.MAX_OFFSET, MessageConst.RECONSUME_TIME, MessageConst.MAX_RECONSUME_TIMES,
    MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET, MessageConst.TRANSACTION_CHECK_TIMES,
    MessageConst.CONSUME_START_TIMESTAMP, MessageConst.ORIGIN_MESSAGE_ID,
})
BATCH = 32

SendBatch = Callable[[Sequence[Message]], object]
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    sent: int
    skipped: int  # rows already replayed by an earlier run (the checkpoint)
    seconds: float


def _load_checkpoint(path: Path) -> tuple[int, int]:
    if not path.exists():
        return (-1, -1)
    data = json.loads(path.read_text())
    return int(data["store_timestamp"]), int(data["commitlog_offset"])


def _save_checkpoint(path: Path, store_timestamp: int, commitlog_offset: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"store_timestamp": store_timestamp, "commitlog_offset": commitlog_offset}))
    os.replace(tmp, path)


def _message(row: Any, topic: str) -> Message:
    props = {k: v for k, v in (row["properties"] or {}).items() if k not in SYSTEM_PROPERTIES}
    # The id the producer was given (UNIQ_KEY), as RocketMQ's clients see it; else the offset id.
    props[MessageConst.ORIGIN_MESSAGE_ID] = row["uniq_key"] or row["msg_id"]
    return Message(topic, bytes(row["body"] or b""), row["flag"], props)


def replay(
    spark: "SparkSession", *, lake_uri: str, topic: str, begin_ms: int, end_ms: int, send_batch: SendBatch,
    checkpoint: Path, target_topic: str | None = None, rate: float | None = None,
    storage_options: Mapping[str, str] | None = None, progress: Progress | None = None,
) -> ReplayResult:
    """Send ``topic``'s messages stored in [begin_ms, end_ms] to ``target_topic`` (default: the
    same topic) with ``send_batch``, at most ``rate`` messages per second."""
    began = time.monotonic()
    register_views(spark, lake_uri, storage_options=storage_options, suffix="_replay")
    args = {"topic": topic, "begin": begin_ms, "end": end_ms}
    where = "topic = :topic AND store_timestamp BETWEEN :begin AND :end"
    total = spark.sql(f"SELECT count(*) FROM messages_replay WHERE {where}", args=args).collect()[0][0]
    last_ts, last_off = _load_checkpoint(checkpoint)
    rows = spark.sql(
        f"SELECT msg_id, uniq_key, body, flag, properties, store_timestamp, commitlog_offset FROM messages_replay "
        f"WHERE {where} AND (store_timestamp > :ts OR (store_timestamp = :ts AND commitlog_offset > :off)) "
        "ORDER BY store_timestamp, commitlog_offset",
        args={**args, "ts": last_ts, "off": last_off},
    ).toLocalIterator()
    skipped = total - spark.sql(
        f"SELECT count(*) FROM messages_replay WHERE {where} "
        "AND (store_timestamp > :ts OR (store_timestamp = :ts AND commitlog_offset > :off))",
        args={**args, "ts": last_ts, "off": last_off},
    ).collect()[0][0]
    sent = 0
    batch: list[Any] = []
    sending_since = 0.0  # the rate counts from the first send, not from query planning

    def flush() -> None:
        nonlocal sent, sending_since
        if not sending_since:
            sending_since = time.monotonic()
        send_batch([_message(r, target_topic or topic) for r in batch])
        _save_checkpoint(checkpoint, batch[-1]["store_timestamp"], batch[-1]["commitlog_offset"])
        sent += len(batch)
        batch.clear()
        if progress:
            progress(skipped + sent, total)
        if rate:
            ahead = sent / rate - (time.monotonic() - sending_since)
            if ahead > 0:
                time.sleep(ahead)

    if progress:
        progress(skipped, total)
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            flush()
    if batch:
        flush()
    return ReplayResult(sent, skipped, time.monotonic() - began)
