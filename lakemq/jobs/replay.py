"""Replay: re-produce a topic's history from the lake into a topic, through a broker.

A topic's rows with ``store_timestamp`` in [begin, end] are read from the ``messages`` table
(Spark, ``format("delta")``) in (store_timestamp, commitlog_offset) order (:mod:`lakemq.jobs.ordered_scan`). They go out
in batches with the same body (uncompressed; the producer compresses again as configured),
flag, keys, tags and user properties, and with ORIGIN_MESSAGE_ID set to the original message
id (the UNIQ_KEY its producer was given). System properties such as UNIQ_KEY, DELAY and the
retry and transaction markers are dropped. Each copy's UNIQ_KEY is derived from the target topic and the source
row's offset id, so replaying the same row into the same topic always yields the same id.

The rows come in pages of ``page_rows`` (Arrow tables), so memory stays bounded. Up to ``window``
batches are on the wire at once (with a ``send_batch`` returning Futures, e.g.
:func:`pipelined_sender`), acknowledged in order.

A checkpoint file, written before each batch goes out, records the last (store_timestamp,
commitlog_offset) acknowledged and the last row of the batch going out. A re-run resumes after
the acknowledged position; the rows that were in flight when the earlier run died are looked
up at the broker by their UNIQ_KEY (``found_at_broker``) and only those missing are sent. So
a killed run followed by a re-run leaves every row in the target exactly once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakemq.common.compression import decompress_body
from lakemq.common.message import Message, MessageConst
from lakemq.errors import ConfigError
from lakemq.jobs.broker_lookup import FoundAtBroker
from lakemq.jobs.ordered_scan import ordered_pages

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["SYSTEM_PROPERTIES", "Checkpoint", "ReplayResult", "pipelined_sender", "replay", "replay_uniq_key"]

SYSTEM_PROPERTIES = frozenset(
    {
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        MessageConst.DELAY_TIME_LEVEL,
        MessageConst.WAIT_STORE_MSG_OK,
        MessageConst.REAL_TOPIC,
        MessageConst.REAL_QUEUE_ID,
        MessageConst.RETRY_TOPIC,
        MessageConst.TRANSACTION_PREPARED,
        MessageConst.PRODUCER_GROUP,
        MessageConst.MIN_OFFSET,
        MessageConst.MAX_OFFSET,
        MessageConst.RECONSUME_TIME,
        MessageConst.MAX_RECONSUME_TIMES,
        MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET,
        MessageConst.TRANSACTION_CHECK_TIMES,
        MessageConst.CONSUME_START_TIMESTAMP,
        MessageConst.ORIGIN_MESSAGE_ID,
    }
)
BATCH = 128
WINDOW = 4  # batches in flight when send_batch returns Futures
PAGE_ROWS = 100_000  # rows per lake query (an Arrow table in memory at a time)

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
    def load(cls, path: Path) -> Checkpoint:
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            sending = data.get("sending")
            return cls(
                (int(data["store_timestamp"]), int(data["commitlog_offset"])),
                (int(sending[0]), int(sending[1])) if sending else None,
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ConfigError(
                f"replay checkpoint {path} is unreadable ({exc}); delete it to start over"
            ) from exc

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "store_timestamp": self.done[0],
                    "commitlog_offset": self.done[1],
                    "sending": list(self.sending) if self.sending else None,
                }
            )
        )
        os.replace(tmp, path)


def replay_uniq_key(target_topic: str, source_msg_id: str) -> str:
    return hashlib.sha1(f"replay:{target_topic}:{source_msg_id}".encode()).hexdigest()[:32].upper()


def _properties(column: pa.ChunkedArray) -> list[list[tuple[str, str]]]:
    """The map column as (key, value) lists, from its flat key and value arrays (converting
    the map row by row is the slow part of a page)."""
    maps = column.combine_chunks()
    offsets = maps.offsets.to_pylist()
    pairs = list(zip(maps.keys.to_pylist(), maps.items.to_pylist()))
    return [pairs[offsets[i] : offsets[i + 1]] for i in range(len(maps))]


def _messages(page: pa.Table, topic: str) -> Iterator[tuple[Position, Message]]:
    """The page's rows as messages to send (read column-wise: far cheaper than row objects)."""
    cols = {name: page.column(name).to_pylist() for name in page.column_names if name != "properties"}
    properties = _properties(page.column("properties"))
    for i in range(page.num_rows):
        props = {k: v for k, v in properties[i] if k not in SYSTEM_PROPERTIES}
        msg_id = cols["msg_id"][i]
        # The id the producer was given (UNIQ_KEY), as RocketMQ's clients see it; else the offset id.
        props[MessageConst.ORIGIN_MESSAGE_ID] = cols["uniq_key"][i] or msg_id
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = replay_uniq_key(topic, msg_id)
        body = decompress_body(cols["body"][i] or b"", cols["sys_flag"][i])
        yield (
            (cols["store_timestamp"][i], cols["commitlog_offset"][i]),
            Message(topic, body, cols["flag"][i], props),
        )


def pipelined_sender(producer: Any) -> SendBatch:
    """A SendBatch over a SyncProducer that returns at once with a Future, so the next batch
    is built while this one is on the wire."""
    from lakemq.client.sync import background_loop

    def send(msgs: Sequence[Message]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(producer.producer.send_batch(list(msgs)), background_loop())

    return send


def replay(
    spark: SparkSession,
    *,
    lake_uri: str,
    topic: str,
    begin_ms: int,
    end_ms: int,
    send_batch: SendBatch,
    checkpoint: Path,
    target_topic: str | None = None,
    rate: float | None = None,
    batch: int = BATCH,
    window: int = WINDOW,
    page_rows: int = PAGE_ROWS,
    found_at_broker: FoundAtBroker | None = None,
    storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Send ``topic``'s messages stored in [begin_ms, end_ms] to ``target_topic`` (default: the
    same topic) with ``send_batch``, at most ``rate`` messages per second. ``send_batch`` may
    return a Future: then up to ``window`` batches are in flight, acknowledged in order.
    Without ``found_at_broker`` a dead run's in-flight batches are sent again."""
    if batch <= 0 or window <= 0 or page_rows <= 0 or (rate is not None and rate <= 0):
        raise ConfigError("batch, window, page_rows and rate must be > 0")
    began = time.monotonic()
    target = target_topic or topic
    state = Checkpoint.load(checkpoint)
    total, left, pages = ordered_pages(
        spark,
        lake_uri,
        topic=topic,
        begin_ms=begin_ms,
        end_ms=end_ms,
        after=state.done,
        page_rows=page_rows,
        storage_options=storage_options,
    )
    skipped = total - left
    sent = recovered = 0
    pending: list[Message] = []
    in_flight: deque[tuple[Any, Position, int]] = deque()  # (future or result, last row, count)
    acked: Position = state.done
    last: Position = state.done  # the newest row sent or found at the broker
    sending_since = 0.0  # the rate counts from the first send, not from the lake scan

    def ack(until: int) -> None:
        """Take acknowledgements in batch order: wait for the oldest while more than ``until``
        batches are in flight, then take those already done."""
        nonlocal acked, sent
        while in_flight:
            outcome, position, count = in_flight[0]
            is_future = isinstance(outcome, concurrent.futures.Future)
            if len(in_flight) <= until and is_future and not outcome.done():
                return
            in_flight.popleft()
            if is_future:
                outcome.result()
            acked, sent = position, sent + count
            if progress:
                progress(skipped + recovered + sent, total)

    def submit() -> None:
        nonlocal sending_since
        if not sending_since:
            sending_since = time.monotonic()
        Checkpoint(acked, last).save(checkpoint)
        in_flight.append((send_batch(list(pending)), last, len(pending)))
        pending.clear()
        ack(until=window - 1)
        if rate:
            ahead = (sent + sum(n for _, _, n in in_flight)) / rate - (time.monotonic() - sending_since)
            if ahead > 0:
                time.sleep(ahead)

    if progress:
        progress(skipped, total)
    for page in pages:
        for position, msg in _messages(page, target):
            last = position
            if (
                state.sending
                and found_at_broker
                and position <= state.sending
                and found_at_broker(target, msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            ):
                recovered += 1
                continue
            pending.append(msg)
            if len(pending) == batch:
                submit()
    if pending:
        submit()
    ack(until=0)
    if last != acked or state.sending:
        Checkpoint(last).save(checkpoint)
    return ReplayResult(
        sent,
        skipped,
        recovered,
        time.monotonic() - began,
        time.monotonic() - sending_since if sending_since else 0.0,
    )
