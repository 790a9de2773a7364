"""The ``lakemq`` source as a Structured Streaming source: ``spark.readStream.format("lakemq")``.

An offset is, per (topic, broker, queue), the next queue offset to read:
``{"orders": {"broker-a": {"0": 120, "1": 118}}}``; Spark checkpoints it. A micro-batch reads
each queue's [start, end) through the union reader's own parts (:mod:`lakemq.jobs.live_source`)
over one cut planned by :mod:`lakemq.jobs.live_plan`: the pinned Delta snapshot's rows in the
range, and the pulled rows in the range at or past that snapshot's CommitLog end. Which side a
row comes from is decided per record by the cut, so the switch from the lake to the brokers has
no gap and no duplicate, whether a tier run commits meanwhile or retention has deleted the hot
files a query started from (pulls start at the lake's recorded queue end, never below it).

Options: the batch source's (``namesrv``, ``lake`` or ``conf``, ``topic``, ``storage_options``,
``allowStaleHotTail``) plus ``startingOffsets`` (``earliest`` (default), ``latest``, a time in
epoch milliseconds, or JSON in the offset's shape; a queue it does not name starts at 0) and
``maxOffsetsPerTrigger`` (messages per micro-batch, shared among the queues behind) and
``brokerWaitMs`` (default 60,000). A queue that appears later (a topic scaled up, a broker
added) is read from its first offset.

A broker or name server that cannot be asked (a restart) does not end the query at once: a
micro-batch's planning and its pulls try again for up to ``brokerWaitMs`` (as Kafka's consumer
waits ``default.api.timeout.ms``, 60 s by default), then the query fails with the batch
source's one line naming the broker. Offsets are planned from what the brokers answer, so a
restart in between neither skips nor repeats a message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lakemq.client.sync import background_loop
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import ConfigError, LakeError
from lakemq.jobs.live_clients import drop_client, kept_client
from lakemq.jobs.live_columns import Columns
from lakemq.jobs.live_filters import Pushed
from lakemq.jobs.live_plan import HotSpan, LakeCut, LiveOptions, hot_spans, lake_cut
from lakemq.jobs.live_source import HotPart, LakePart, LiveReader

__all__ = ["BROKER_WAIT_MS", "ROWS_PER_TASK", "LiveStreamReader", "Offsets", "cap_offsets", "pack_spans",
           "queue_ends"]

log = logging.getLogger(__name__)

BROKER_WAIT_MS = 60_000  # brokerWaitMs's default: a restart's outage, not a lost broker

# topic -> broker -> queue id (a string: offsets are JSON) -> queue offset
Offsets = dict[str, dict[str, dict[str, int]]]

# Messages a read task is worth: below this a micro-batch's queue ranges share tasks. A task
# costs a Python worker's turn, its Arrow stream to the JVM and its scheduling, about as much
# as pulling some thousands of messages, and most micro-batches of a stream that keeps up are
# a second's messages; a backlog's batches still get a task per queue.
ROWS_PER_TASK = 10_000


def _flat(offsets: Offsets) -> dict[tuple[str, str, str], int]:
    return {(t, b, q): o for t, brokers in offsets.items() for b, queues in brokers.items() for q, o in queues.items()}


def _nested(flat: dict[tuple[str, str, str], int]) -> Offsets:
    out: Offsets = {}
    for (topic, broker, queue), offset in sorted(flat.items()):
        out.setdefault(topic, {}).setdefault(broker, {})[queue] = offset
    return out


def queue_ends(options: LiveOptions, cut: LakeCut, pushed: Pushed) -> Offsets:
    """Each queue's end now: the broker's max offset, or what the lake records for a queue
    whose broker holds nothing past it."""
    spans, _stale = hot_spans(options, cut, pushed)
    flat = {(t, b, q): int(o) for b, topics in cut.queue_ends.items() for t, queues in topics.items()
            for q, o in queues.items() if pushed.topics is None or t in pushed.topics}
    for span in spans:
        key = (span.topic, span.broker, str(span.queue_id))
        flat[key] = max(flat.get(key, 0), span.end)
    return _nested(flat)


def pack_spans(spans: list[HotSpan], per_task: int = ROWS_PER_TASK) -> list[tuple[HotSpan, ...]]:
    """The spans in as many tasks as their messages are worth (one per ``per_task``, at most
    one per span, at least one), largest first into the task holding fewest."""
    if not spans:
        return []
    total = sum(s.end - s.start for s in spans)
    tasks: list[list[HotSpan]] = [[] for _ in range(min(len(spans), max(1, -(-total // per_task))))]
    held = [0] * len(tasks)
    for span in sorted(spans, key=lambda s: (s.start - s.end, s.topic, s.broker, s.queue_id)):
        least = held.index(min(held))
        tasks[least].append(span)
        held[least] += span.end - span.start
    return [tuple(task) for task in tasks]


def cap_offsets(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """``latest``, holding the batch to ``limit`` messages: each round gives every queue still
    behind an equal share of what is left (at least one), in a fixed order."""
    begin, end = _flat(start), _flat(latest)
    chosen = {k: begin.get(k, 0) for k in end}
    left = limit
    behind = [k for k in sorted(end) if chosen[k] < end[k]]
    while left > 0 and behind:
        share = max(1, left // len(behind))
        for key in behind:
            step = min(share, end[key] - chosen[key], left)
            chosen[key] += step
            left -= step
        behind = [k for k in behind if chosen[k] < end[k]]
    for key, offset in begin.items():
        chosen.setdefault(key, offset)  # a queue no longer listed keeps its place
    return _nested(chosen)


class LiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], columns: Columns | None = None) -> None:
        lowered = {key.lower(): value for key, value in options.items()}
        self.batch = LiveReader(options, columns)
        self.starting = lowered.get("startingoffsets", "earliest").strip()
        limit = lowered.get("maxoffsetspertrigger")
        if limit is not None and (not limit.isdigit() or int(limit) < 1):
            raise ConfigError(f"maxOffsetsPerTrigger must be a positive number of messages, not {limit!r}")
        self.max_per_trigger = int(limit) if limit else None
        wait = lowered.get("brokerwaitms", str(BROKER_WAIT_MS))
        if not wait.isdigit():
            raise ConfigError(f"brokerWaitMs must be a number of milliseconds, not {wait!r}")
        self.batch.wait_s = int(wait) / 1000  # the read tasks' pulls wait as long
        self.target: Offsets | None = None  # Trigger.AvailableNow's end

    def _ends(self) -> Offsets:
        """Each queue's end now; a broker or name server that cannot be asked is asked again
        (a cut planned afresh each time) for up to brokerWaitMs, then its LakeError stands."""
        deadline = time.monotonic() + self.batch.wait_s
        pause = 0.25
        while True:
            cut = lake_cut(self.batch.options.lake, self.batch.pushed)
            try:
                return queue_ends(self.batch.options, cut, self.batch.pushed)
            except LakeError as exc:  # raised by hot_spans only for a hot tail it cannot ask
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                log.warning("%s; asking again for up to %.0f s (brokerWaitMs)", exc, left)
                time.sleep(min(pause, left))
                pause = min(pause * 2, 2.0)

    def initialOffset(self) -> dict[str, Any]:
        ends = self._ends()
        if self.starting == "earliest":
            return _nested({k: 0 for k in _flat(ends)})
        if self.starting == "latest":
            return ends
        if self.starting.isdigit():
            return self._at_time(ends, int(self.starting))
        try:
            given = json.loads(self.starting)
            named = {(str(t), str(b), str(q)): int(o) for (t, b, q), o in _flat(given).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise ConfigError("startingOffsets must be earliest, latest, epoch milliseconds or JSON "
                              '{"topic": {"broker": {"queue id": offset}}}') from exc
        return _nested({**{k: 0 for k in _flat(ends)}, **named})

    def _at_time(self, ends: Offsets, timestamp_ms: int) -> Offsets:
        """Per queue, the first offset stored at or after the time (the broker's index answers)."""
        keys = list(_flat(ends))
        namesrv = self.batch.options.namesrv
        client = kept_client(namesrv)

        async def search() -> list[int]:
            return list(await asyncio.gather(*(client.consumer.search_offset(MessageQueue(t, b, int(q)), timestamp_ms)
                                               for t, b, q in keys)))

        try:
            found = asyncio.run_coroutine_threadsafe(search(), background_loop()).result(30)
        except BaseException:
            drop_client(namesrv, client)
            raise
        return _nested(dict(zip(keys, found, strict=True)))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._ends()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        latest = self.target if self.target is not None else self._ends()
        # A queue never goes back: one the brokers no longer list keeps where the stream was.
        merged = {k: max(o, _flat(start).get(k, 0)) for k, o in _flat(latest).items()}
        latest = _nested({**_flat(start), **merged})
        if isinstance(limit, ReadMaxRows):
            return cap_offsets(start, latest, limit.max_rows)
        return latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = _flat(start)
        ranges = {k: (begin.get(k, 0), o) for k, o in _flat(end).items() if o > begin.get(k, 0)}
        if not ranges:
            return []
        pushed = Pushed(topics=frozenset(t for t, _, _ in ranges))
        cut = lake_cut(self.batch.options.lake, pushed)
        return self._lake_parts(cut, ranges) + self._hot_parts(cut, ranges)

    def _lake_parts(self, cut: LakeCut, ranges: dict[tuple[str, str, str], tuple[int, int]]) -> list[InputPartition]:
        """Per data file, the queue ranges it may hold rows of; a broker's range takes only rows
        of its store hosts, as the lake's commits record them (queue offsets repeat across
        brokers of one topic)."""
        per_topic: dict[str, list[tuple[int, int, int, tuple[str, ...] | None]]] = {}
        brokers: dict[tuple[str, int], set[str]] = {}  # (topic, queue id) -> the brokers serving it
        for (topic, broker, queue), (start, end) in sorted(ranges.items()):
            # A broker with commits that lack hosts: its rows are told apart only on a topic it alone serves.
            hosts = None if broker in cut.hostless else tuple(sorted(cut.store_hosts.get(broker, ())))
            per_topic.setdefault(topic, []).append((int(queue), start, end, hosts))
            brokers.setdefault((topic, int(queue)), set()).add(broker)
        parts: list[InputPartition] = []
        for file in cut.files:
            wanted = per_topic.get(file.topic, [])
            if any(h is None and len(brokers[(file.topic, q)]) > 1 for q, _, _, h in wanted):
                raise LakeError(f"the lakemq stream reads {file.topic} from more than one broker and the lake "
                                "holds part of it in commits that record no store hosts (tiered before they "
                                "were recorded), so the brokers' rows cannot be told apart; stream one "
                                "broker's topics")
            kept = tuple((q, s, e, h) for q, s, e, h in wanted
                         if (file.max_queue_offset is None or s <= file.max_queue_offset)
                         and (file.min_queue_offset is None or file.min_queue_offset < e) and h != ())
            if kept:
                parts.append(LakePart(file, kept))
        return parts

    def _hot_parts(self, cut: LakeCut, ranges: dict[tuple[str, str, str], tuple[int, int]]) -> list[InputPartition]:
        spans: list[HotSpan] = []
        for (topic, broker, queue), (start, end) in sorted(ranges.items()):
            # Below the lake's recorded end every row is the lake's: pulls start there (the broker
            # may have deleted those files since).
            recorded = int(cut.queue_ends.get(broker, {}).get(topic, {}).get(queue, 0))
            first = max(start, recorded)
            if first < end:
                spans.append(HotSpan(broker, topic, int(queue), first, end, cut.commitlog_ends.get(broker, -1)))
        return [HotPart(task) for task in pack_spans(spans)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the brokers keep no offsets for the source's pulls."""
