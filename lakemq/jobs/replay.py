"""Replay: re-produce a topic's history from the lake into a topic, through a broker.

Rows of the ``messages`` view with ``store_timestamp`` in [begin, end] are read in
(store_timestamp, commitlog_offset) order. They go out in batches with the same body
(uncompressed; the producer compresses again as configured), flag, keys, tags and user
properties, and with ORIGIN_MESSAGE_ID set to the original message id (the UNIQ_KEY its
producer was given). System properties such as UNIQ_KEY, DELAY and the retry and transaction
markers are dropped. Each copy's UNIQ_KEY is derived from the target topic and the source
row's offset id, so replaying the same row into the same topic always yields the same id.

A checkpoint file records the last (store_timestamp, commitlog_offset) acknowledged and, while
a batch is on the wire, the position of its last row. A re-run resumes after the
acknowledged position; the rows of a batch that was in flight when the earlier run died are
looked up at the broker by their UNIQ_KEY (``found_at_broker``) and only those missing are
sent. So a killed run followed by a re-run leaves every row in the target exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakemq.common.message import Message, MessageConst, MessageSysFlag
from lakemq.errors import ConfigError
from lakemq.jobs.broker_lookup import FoundAtBroker
from lakemq.jobs.sql import register_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ReplayResult", "Checkpoint", "replay", "replay_uniq_key", "SYSTEM_PROPERTIES"]

SYSTEM_PROPERTIES = frozenset({
    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.DELAY_TIME_LEVEL, MessageConst.WAIT_STORE_MSG_OK,
    MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.RETRY_TOPIC,
    MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP, MessageConst.MIN_OFFSET,
    MessageConst.MAX_OFFSET, MessageConst.RECONSUME_TIME, MessageConst.MAX_RECONSUME_TIMES,
    MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET, MessageConst.TRANSACTION_CHECK_TIMES,
    MessageConst.CONSUME_START_TIMESTAMP, MessageConst.ORIGIN_MESSAGE_ID,
})
BATCH = 128

SendBatch = Callable[[Sequence[Message]], object]
Progress = Callable[[int, int], None]
Position = tuple[int, int]  # (store_timestamp, commitlog_offset)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    sent: int
    skipped: int  # rows already replayed by an earlier run (the checkpoint)
    recovered: int  # rows of a dead run's in-flight batch found at the broker, not sent again
    seconds: float
    send_seconds: float  # from the first send to the last acknowledgement


@dataclass(frozen=True, slots=True)
class Checkpoint:
    done: Position = (-1, -1)
    sending: Position | None = None  # last row of the batch on the wire

    @classmethod
    def load(cls, path: Path) -> "Checkpoint":
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            sending = data.get("sending")
            return cls((int(data["store_timestamp"]), int(data["commitlog_offset"])),
                       (int(sending[0]), int(sending[1])) if sending else None)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ConfigError(f"replay checkpoint {path} is unreadable ({exc}); delete it to start over") from exc

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"store_timestamp": self.done[0], "commitlog_offset": self.done[1],
                                   "sending": list(self.sending) if self.sending else None}))
        os.replace(tmp, path)


def replay_uniq_key(target_topic: str, source_msg_id: str) -> str:
    return hashlib.sha1(f"replay:{target_topic}:{source_msg_id}".encode()).hexdigest()[:32].upper()


def _message(row: Any, topic: str) -> Message:
    props = {k: v for k, v in (row["properties"] or {}).items() if k not in SYSTEM_PROPERTIES}
    # The id the producer was given (UNIQ_KEY), as RocketMQ's clients see it; else the offset id.
    props[MessageConst.ORIGIN_MESSAGE_ID] = row["uniq_key"] or row["msg_id"]
    props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = replay_uniq_key(topic, row["msg_id"])
    body = bytes(row["body"] or b"")
    if row["sys_flag"] & MessageSysFlag.COMPRESSED_FLAG:
        body = zlib.decompress(body)
    return Message(topic, body, row["flag"], props)


def replay(
    spark: "SparkSession", *, lake_uri: str, topic: str, begin_ms: int, end_ms: int, send_batch: SendBatch,
    checkpoint: Path, target_topic: str | None = None, rate: float | None = None, batch: int = BATCH,
    found_at_broker: FoundAtBroker | None = None, storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Send ``topic``'s messages stored in [begin_ms, end_ms] to ``target_topic`` (default: the
    same topic) with ``send_batch``, at most ``rate`` messages per second. Without
    ``found_at_broker`` a dead run's in-flight batch is sent again."""
    if batch <= 0 or (rate is not None and rate <= 0):
        raise ConfigError("batch and rate must be > 0")
    began = time.monotonic()
    target = target_topic or topic
    state = Checkpoint.load(checkpoint)
    register_views(spark, lake_uri, storage_options=storage_options, suffix="_replay")
    args = {"topic": topic, "begin": begin_ms, "end": end_ms, "ts": state.done[0], "off": state.done[1]}
    where = "topic = :topic AND store_timestamp BETWEEN :begin AND :end"
    after = "(store_timestamp > :ts OR (store_timestamp = :ts AND commitlog_offset > :off))"
    total, left = spark.sql(
        f"SELECT count(*), count_if({after}) FROM messages_replay WHERE {where}", args=args).collect()[0]
    rows = spark.sql(
        f"SELECT msg_id, uniq_key, body, flag, sys_flag, properties, store_timestamp, commitlog_offset "
        f"FROM messages_replay WHERE {where} AND {after} ORDER BY store_timestamp, commitlog_offset",
        args=args,
    ).toLocalIterator(prefetchPartitions=True)
    skipped = total - left
    sent = recovered = 0
    pending: list[Message] = []
    acked: Position = state.done
    last: Position = state.done  # the newest row sent or found at the broker
    sending_since = 0.0  # the rate counts from the first send, not from query planning

    def flush() -> None:
        nonlocal sent, sending_since, acked
        if not sending_since:
            sending_since = time.monotonic()
        Checkpoint(acked, last).save(checkpoint)
        send_batch(pending)
        acked = last
        Checkpoint(acked).save(checkpoint)
        sent += len(pending)
        pending.clear()
        if progress:
            progress(skipped + recovered + sent, total)
        if rate:
            ahead = sent / rate - (time.monotonic() - sending_since)
            if ahead > 0:
                time.sleep(ahead)

    if progress:
        progress(skipped, total)
    for row in rows:
        position = (row["store_timestamp"], row["commitlog_offset"])
        msg = _message(row, target)
        last = position
        if state.sending and found_at_broker and position <= state.sending \
                and found_at_broker(target, msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]):
            recovered += 1
            continue
        pending.append(msg)
        if len(pending) == batch:
            flush()
    if pending:
        flush()
    if last != acked or state.sending:
        Checkpoint(last).save(checkpoint)
    return ReplayResult(sent, skipped, recovered, time.monotonic() - began,
                        time.monotonic() - sending_since if sending_since else 0.0)
