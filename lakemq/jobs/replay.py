"""Replay: re-produce a topic's history from the lake into a topic, through a broker.

A topic's rows with ``store_timestamp`` in [begin, end] are read from the ``messages`` table
(Spark SQL on the Delta table) in (store_timestamp, commitlog_offset) order (:mod:`lakemq.jobs.ordered_scan`). They go out
in batches with the same body (uncompressed; the producer compresses again as configured),
flag, keys, tags and user properties, and with ORIGIN_MESSAGE_ID set to the original message
id (the UNIQ_KEY its producer was given). System properties such as UNIQ_KEY, DELAY and the
retry and transaction markers are dropped. Each copy's UNIQ_KEY is derived from the target topic and the source
row's offset id, so replaying the same row into the same topic always yields the same id.

Queues: a message from source queue q goes to the target's queue q mod (the target's queue
count), so each source queue's order is kept in one target queue, and a target with as many
queues as the source gets each message in the queue it had. A batch is split by queue.

The rows come in pages of ``page_rows`` (Arrow tables), so memory stays bounded. Up to ``window``
batches are on the wire at once (with a ``send_batch`` returning Futures, e.g.
:func:`pipelined_sender`), acknowledged in order.

Sending each row once, whatever the window: a ledger (:class:`Ledger`, one JSON file per source
topic, target topic, cluster and lake) records the ranges of source positions (store_timestamp,
commitlog_offset) whose rows the target has acknowledged, across every run and window (a
position does not name a broker, so two brokers' rows may share one: a batch never ends
between them, and the ledger holds both or neither). A run
skips the rows in those ranges, and adds its own range as batches are acknowledged. Before a
batch goes out the ledger records the range on the wire; a re-run after a run died looks the
rows of that range up at the broker by their UNIQ_KEY (``found_at_broker``) and sends only
those missing. So re-runs, over the same window or an overlapping one, leave every row in the
target exactly once. (A row tiered into the lake after a run covered its store time is not
sent by later runs either: replay a window once the lake holds it.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakemq.common.compression import decompress_body
from lakemq.common.durable import write_file_durably
from lakemq.common.message import Message, MessageConst
from lakemq.errors import ConfigError
from lakemq.jobs.broker_lookup import FoundAtBroker
from lakemq.jobs.ordered_scan import ordered_pages

if TYPE_CHECKING:
    import pyarrow as pa

    from lakemq.jobs.lake_sql import SqlSession

__all__ = ["SYSTEM_PROPERTIES", "Ledger", "ReplayResult", "ledger_path", "merge_ranges", "pipelined_sender", "replay",
           "replay_uniq_key"]

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

SendBatch = Callable[[Sequence[Message], int], object]  # (messages of one source queue, that queue)
Progress = Callable[[int, int], None]
Position = tuple[int, int]  # (store_timestamp, commitlog_offset)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    sent: int
    skipped: int  # rows already replayed by an earlier run (the ledger)
    recovered: int  # rows of a dead run's in-flight batch found at the broker, not sent again
    seconds: float
    send_seconds: float  # from the first send to the last acknowledgement


Range = tuple[Position, Position]  # inclusive
_LAST = 2**63 - 1


def merge_ranges(ranges: Sequence[Range]) -> list[Range]:
    """Sorted, overlapping ranges joined."""
    merged: list[Range] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


@dataclass(frozen=True, slots=True)
class Ledger:
    """What the target holds of the source: the source position ranges replayed (acknowledged),
    and the range on the wire when the ledger was written, if any."""

    replayed: tuple[Range, ...] = ()
    sending: Range | None = None  # positions after the first and up to the second

    def holds(self, position: Position) -> bool:
        return any(low <= position <= high for low, high in self.replayed)

    def resume_after(self, begin: Position) -> Position:
        """Where a scan from ``begin`` can start: the end of a replayed range holding it."""
        return next((high for low, high in self.replayed if low <= begin <= high), (-1, -1))

    def with_range(self, done: Range, sending: Range | None = None) -> Ledger:
        return Ledger(tuple(merge_ranges([*self.replayed, done])), sending)

    @classmethod
    def load(cls, path: Path) -> Ledger:
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())

            def span(pair: Any) -> Range:
                return (int(pair[0][0]), int(pair[0][1])), (int(pair[1][0]), int(pair[1][1]))

            sending = data["sending"]
            return cls(tuple(merge_ranges([span(r) for r in data["replayed"]])), span(sending) if sending else None)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ConfigError(f"replay ledger {path} is unreadable ({exc}); delete it to replay everything "
                              "again (the target then gets copies it may hold already)") from exc

    def save(self, path: Path) -> None:
        """Written durably (lakemq.common.durable): a run that dies leaves the old ledger or the
        new one."""
        write_file_durably(path, json.dumps({"replayed": [list(r) for r in self.replayed],
                                             "sending": list(self.sending) if self.sending else None}))


def ledger_path(home: Path, topic: str, target: str, namesrv: str, lake_uri: str) -> Path:
    """The default ledger of replays of ``topic`` into ``target`` of one cluster, from one lake."""
    where = hashlib.sha1(f"{namesrv}|{lake_uri}".encode()).hexdigest()[:12]
    return home / ".lakemq" / "replay" / f"{topic}-to-{target}-{where}.json"


def replay_uniq_key(target_topic: str, source_msg_id: str) -> str:
    return hashlib.sha1(f"replay:{target_topic}:{source_msg_id}".encode()).hexdigest()[:32].upper()


def _properties(column: pa.ChunkedArray) -> list[list[tuple[str, str]]]:
    """The map column as (key, value) lists, from its flat key and value arrays (converting
    the map row by row is the slow part of a page)."""
    maps = column.combine_chunks()
    offsets = maps.offsets.to_pylist()
    pairs = list(zip(maps.keys.to_pylist(), maps.items.to_pylist()))
    return [pairs[offsets[i] : offsets[i + 1]] for i in range(len(maps))]


def _messages(page: pa.Table, topic: str) -> Iterator[tuple[Position, int, Message]]:
    """The page's rows as (position, source queue, message to send), read column-wise: far
    cheaper than row objects."""
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
            cols["queue_id"][i],
            Message(topic, body, cols["flag"][i], props),
        )


def pipelined_sender(producer: Any, target_topic: str) -> SendBatch:
    """A SendBatch over a SyncProducer to the target's queue ``source queue mod queue count``,
    returning at once with a Future, so the next batch is built while this one is on the wire."""
    from lakemq.client.sync import background_loop

    loop = background_loop()
    queues = asyncio.run_coroutine_threadsafe(producer.producer.fetch_publish_message_queues(target_topic),
                                              loop).result(60)
    if not queues:
        raise ConfigError(f"topic {target_topic} has no queue to write to")

    def send(msgs: Sequence[Message], source_queue: int) -> concurrent.futures.Future[Any]:
        mq = queues[source_queue % len(queues)]
        return asyncio.run_coroutine_threadsafe(producer.producer.send_batch(list(msgs), mq=mq), loop)

    return send


def _by_queue(batch: Sequence[tuple[int, Message]]) -> dict[int, list[Message]]:
    groups: dict[int, list[Message]] = {}
    for queue, msg in batch:
        groups.setdefault(queue, []).append(msg)
    return groups


def replay(
    spark: SqlSession | Any,
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
    same topic) with ``send_batch``, at most ``rate`` messages per second, skipping what the
    ledger ``checkpoint`` says the target holds. ``send_batch`` gets the messages of one source
    queue; it may return a Future: then up to ``window`` batches are in flight, acknowledged in
    order. Without ``found_at_broker`` a dead run's in-flight batches are sent again."""
    if batch <= 0 or window <= 0 or page_rows <= 0 or (rate is not None and rate <= 0):
        raise ConfigError("batch, window, page_rows and rate must be > 0")
    began = time.monotonic()
    target = target_topic or topic
    ledger = Ledger.load(checkpoint)
    low: Position = (begin_ms, -1)  # the start of this run's range, before every row of the window
    total, left, pages = ordered_pages(
        spark,
        lake_uri,
        topic=topic,
        begin_ms=begin_ms,
        end_ms=end_ms,
        after=ledger.resume_after(low),
        page_rows=page_rows,
        storage_options=storage_options,
    )
    skipped = total - left
    sent = recovered = 0
    pending: list[tuple[int, Message]] = []
    in_flight: deque[tuple[list[Any], Position, int]] = deque()  # (futures or results, last row, count)
    acked: Position = low  # this run's range is [low, acked] once acknowledged
    last: Position = low  # the newest row sent
    sending_since = 0.0  # the rate counts from the first send, not from the lake scan

    def ack(until: int) -> None:
        """Take acknowledgements in batch order: wait for the oldest while more than ``until``
        batches are in flight, then take those already done."""
        nonlocal acked, sent
        while in_flight:
            outcomes, position, count = in_flight[0]
            futures = [o for o in outcomes if isinstance(o, concurrent.futures.Future)]
            if len(in_flight) <= until and not all(f.done() for f in futures):
                return
            in_flight.popleft()
            for future in futures:
                future.result()
            acked, sent = position, sent + count
            if progress:
                progress(skipped + recovered + sent, total)

    def submit() -> None:
        nonlocal sending_since
        if not sending_since:
            sending_since = time.monotonic()
        # On the wire: up to this batch's last row, and still the dead run's range until this run
        # is past it (rows found at the broker there are not in this run's batches).
        high = max(last, ledger.sending[1]) if ledger.sending else last
        ledger.with_range((low, acked), (acked, high)).save(checkpoint)
        outcomes = [send_batch(msgs, queue) for queue, msgs in _by_queue(pending).items()]
        in_flight.append((outcomes, last, len(pending)))
        pending.clear()
        ack(until=window - 1)
        if rate:
            ahead = (sent + sum(n for _, _, n in in_flight)) / rate - (time.monotonic() - sending_since)
            if ahead > 0:
                time.sleep(ahead)

    if progress:
        progress(skipped, total)
    for page in pages:
        for position, queue, msg in _messages(page, target):
            if ledger.holds(position):
                skipped += 1
                continue
            if (
                ledger.sending
                and found_at_broker
                and ledger.sending[0] < position <= ledger.sending[1]
                and found_at_broker(target, msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            ):
                recovered += 1
                continue
            if len(pending) >= batch and position != last:
                # A batch never ends between rows of one position (two brokers' rows may share
                # one): the ledger's ranges then hold or leave out both.
                submit()
            last = position
            pending.append((queue, msg))
    if pending:
        submit()
    ack(until=0)
    # Every row of the window is in the target now: the whole window is replayed.
    ledger.with_range((low, (end_ms, _LAST))).save(checkpoint)
    return ReplayResult(
        sent,
        skipped,
        recovered,
        time.monotonic() - began,
        time.monotonic() - sending_since if sending_since else 0.0,
    )
