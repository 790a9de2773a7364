"""The ``lakemq`` PySpark data source's reader (the source itself is lakemq.jobs.sources): a topic's
messages across the lake and the live brokers.

    register_sources(spark)  # lakemq.jobs.sources, once per session
    spark.read.format("lakemq").option("namesrv", "127.0.0.1:9876").option("lake", lake) \\
        .option("topic", "orders").load()

Rows have the lake's ``messages`` schema, or the columns of it a schema given to the reader
names (:mod:`lakemq.jobs.live_columns`). Planning (:mod:`lakemq.jobs.live_plan`) pins one
version of the Delta table and asks the brokers for each queue's max offset; the read is then
one Spark partition per data file of that version and one per queue range past it, pulled
from the brokers over the remoting protocol (the master, or a slave where the master's
``slaveReadEnable`` says so) and decoded by the lake's own decoder, so a pulled message is
the same row the lake will hold for it. Each action on a DataFrame plans again: a query sees
every message acknowledged before it was planned, and no row twice.

Options: ``namesrv``, ``lake`` (or ``conf``, a broker.conf giving ``namesrvAddr`` and
``lakeUri``), ``topic`` (default every topic the name server knows, and the lake's),
``storage_options`` (JSON, as for the lake), ``allowStaleHotTail`` (a broker that cannot be
asked leaves its hot tail out instead of failing the read; the planner logs how far behind
the lake is), ``keyIndex`` (default true: a read whose filters restrict ``keys`` to a finite
set looks the keys up in each broker's key index instead of pulling its hot tail,
:mod:`lakemq.jobs.live_index`, and reads only the lake files the lake's ``message_keys``
points to; false pulls every hot tail and reads every file). Filters on ``topic``, ``queue_id``,
``tags``, ``keys`` (equality, IN) and ``store_timestamp`` (comparisons) are pushed down and
applied on both sides.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem
from pyspark.sql.datasource import (
    DataSourceReader,
    Filter,
    InputPartition,
)

from lakemq.client.results import PullStatus
from lakemq.client.sync import SyncPullConsumer, background_loop
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, LakeError, LakeMQError, RemotingError
from lakemq.jobs.decode import decode_pulled_body
from lakemq.jobs.live_clients import drop_client, is_kept, kept_client
from lakemq.jobs.live_columns import Columns
from lakemq.jobs.live_filters import Pushed, push_filters, rows_where
from lakemq.jobs.live_index import IndexPart, QueueRange, in_ranges, index_rows
from lakemq.jobs.live_plan import (
    HotSpan,
    LakeFile,
    LiveOptions,
    hot_spans,
    lake_cut,
    stale_note,
)
from lakemq.jobs.live_pull import PULL_BATCH, Chain, pull_chain
from lakemq.tiering.tables import DATA_SCHEMA, MESSAGES_SCHEMA, MESSAGES_TABLE, SPARK_ARROW_SCHEMA

__all__ = ["HotPart", "LakePart", "LiveReader"]

log = logging.getLogger(__name__)

# How many queue offsets a full pull answer covered, per broker and tag expression, last seen
# in this process (the broker's maxTransferCount cap, or more where the tags skip messages): a
# queue range's first pulls are pipelined at once instead of one first pull to learn it. A
# wrong guess only breaks the chain.
_strides: dict[tuple[str, str], int] = {}

Asked = tuple[SyncPullConsumer, Future[Chain]]  # pulls under way, and the client that asked


@dataclass
class LakePart(InputPartition):
    file: LakeFile
    # A stream's micro-batch: per queue id of the file's topic, the queue offsets [start, end) it
    # reads and the store hosts of the broker whose rows those are (None: any host).
    ranges: tuple[QueueRange, ...] | None = None


@dataclass
class HotPart(InputPartition):
    """Queue ranges read one after another in one task (a stream's small micro-batch packs
    several: a task costs more than pulling a few hundred messages)."""

    spans: tuple[HotSpan, ...]


@functools.cache
def _freeze_imported() -> None:
    """PySpark's daemon runs ``gc.collect()`` after every task of a reused Python worker; the
    ~90,000 objects of what the worker imported (pyspark, pyarrow, numpy, lakemq) stay for its
    life, and scanning them cost ~40 ms a task (near 30% of a 10,000-row task's CPU). Frozen
    once, each collection scans only what later tasks made."""
    gc.freeze()


class LiveReader(DataSourceReader):
    def __init__(self, options: dict[str, str], columns: Columns | None = None) -> None:
        self.options = LiveOptions.of(options)
        self.columns = columns  # None: every column of messages
        self.pushed = Pushed(topics=frozenset([self.options.topic]) if self.options.topic else None)
        # How long a pull tries again after a broker failed it (the stream's brokerWaitMs); a
        # batch read fails at once.
        self.wait_s = 0.0

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, left = push_filters(self.pushed, filters)
        return left

    def partitions(self) -> list[InputPartition]:
        if self.pushed.empty:
            return []
        cut = lake_cut(self.options.lake, self.pushed, key_index=self.options.key_index)
        spans, stale = hot_spans(self.options, cut, self.pushed)
        if stale:
            log.warning("%s", stale_note(stale))
        parts: list[InputPartition] = [LakePart(f) for f in cut.files]
        if self.options.key_index and self.pushed.key_lookups is not None:
            # One task per topic and broker: its look-ups cover every queue at once.
            groups: dict[tuple[str, str], list[HotSpan]] = {}
            for s in spans:
                groups.setdefault((s.broker, s.topic), []).append(s)
            return parts + [IndexPart(tuple(g)) for g in groups.values()]
        return parts + [HotPart((s,)) for s in spans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        _freeze_imported()
        rows = self._rows(partition)
        return rows if self.columns is None else map(self.columns.of, rows)

    def _rows(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, LakePart):
            yield from self._read_file(partition.file, partition.ranges)
        elif isinstance(partition, HotPart):
            # Every span's first pulls go out at once: the broker answers the later queues
            # while this task decodes and hands over the earlier ones.
            consumer = kept_client(self.options.namesrv)
            ahead = [(consumer, self._ask(consumer, s, s.start, self._stride(s.broker))) for s in partition.spans]
            for span, first in zip(partition.spans, ahead, strict=True):
                yield from self._pull(span, first)
        elif isinstance(partition, IndexPart):
            yield from self._look_up(partition.spans)
        # Else the one empty partition Spark plans when partitions() found none: no rows.

    def _read_file(self, file: LakeFile, ranges: tuple[QueueRange, ...] | None) -> Iterator[pa.RecordBatch]:
        lake = self.options.lake
        uri = lake.table_uri(MESSAGES_TABLE)
        if lake.is_local:
            dataset = ds.dataset(f"{uri}/{file.path}", schema=DATA_SCHEMA, format="parquet")
        else:
            dataset = ds.dataset(f"{uri.split('://', 1)[1]}/{file.path}", schema=DATA_SCHEMA, format="parquet",
                                 filesystem=PyFileSystem(FSSpecHandler(lake.fs)))
        for batch in dataset.to_batches():
            n = batch.num_rows
            columns = dict(zip(batch.schema.names, batch.columns, strict=True))
            columns["topic"] = pa.array([file.topic] * n, pa.string())
            columns["store_date"] = pa.array([file.store_date] * n, pa.int32()).cast(pa.date32())
            whole = pa.RecordBatch.from_arrays([columns[f.name] for f in MESSAGES_SCHEMA], schema=SPARK_ARROW_SCHEMA)
            kept = self.pushed.apply(whole if ranges is None else rows_where(whole, in_ranges(whole, ranges)))
            if kept.num_rows:
                yield kept

    def _look_up(self, spans: tuple[HotSpan, ...]) -> Iterator[pa.RecordBatch]:
        consumer = kept_client(self.options.namesrv)
        found = index_rows(consumer.consumer, spans, self.pushed)
        if isinstance(found, str):
            log.info("key index not used, pulling %d queue ranges: %s", len(spans), found)
            for span in spans:
                yield from self._pull(span)
        elif found.num_rows:
            yield found

    def _stride(self, broker: str) -> int:
        return _strides.get((broker, self.pushed.subscription), 0)

    def _ask(self, consumer: SyncPullConsumer, span: HotSpan, offset: int, stride: int) -> Future[Chain]:
        mq = MessageQueue(span.topic, span.broker, span.queue_id)
        return asyncio.run_coroutine_threadsafe(
            pull_chain(consumer.consumer, mq, self.pushed.subscription, offset, span.end, stride), background_loop())

    def _pull(self, span: HotSpan, asked_ahead: Asked | None = None) -> Iterator[pa.RecordBatch]:
        """The span's rows, a chain of pulls at a time; ``asked_ahead``: its first chain, asked
        already (and the client that asked)."""
        offset, stalled, stride = span.start, False, self._stride(span.broker)
        pending = asked_ahead
        failing_since: float | None = None
        while offset < span.end:
            if pending is None:
                consumer = kept_client(self.options.namesrv)
                pending = consumer, self._ask(consumer, span, offset, stride)
            consumer, asked_chain = pending
            pending = None
            try:
                chain = asked_chain.result()
            except (RemotingError, BrokerError, LakeMQError) as exc:
                if not is_kept(self.options.namesrv, consumer):
                    continue  # asked ahead on a client another range's failure dropped since: ask anew
                addr = consumer.consumer.core.instance.find_broker_addr(span.broker, master_only=False)
                drop_client(self.options.namesrv, consumer)
                failing_since = time.monotonic() if failing_since is None else failing_since
                failed = f"broker {span.broker} ({addr}) failed a pull of {span.topic} queue {span.queue_id} " \
                         f"from offset {offset}: {exc}"
                if time.monotonic() - failing_since >= self.wait_s:
                    raise LakeError(f"the hot tail is unavailable: {failed}") from exc
                # A restarting broker: the same offset again on a fresh client (routes, connections);
                # what was yielded lies below it, so nothing repeats.
                log.warning("%s; pulling again", failed)
                time.sleep(1.0)
                continue
            failing_since = None
            bodies: list[bytes] = []
            for asked, raw in chain:
                if raw.status is PullStatus.FOUND:
                    bodies.append(raw.body)
                    stride = min(max(raw.next_begin_offset - asked, 0), PULL_BATCH)
                    if raw.next_begin_offset < span.end:  # not cut short by the range's end
                        _strides[span.broker, self.pushed.subscription] = stride
                elif raw.status is not PullStatus.NO_MATCHED_MSG:
                    raise LakeError(f"broker {span.broker} answered {raw.status.value} for {span.topic} queue "
                                    f"{span.queue_id} at offset {asked} (its offsets {raw.min_offset}-"
                                    f"{raw.max_offset}); the read was planned up to {span.end}: run it again")
                if raw.next_begin_offset <= asked:
                    # One retry: a broker that just expired the files it read answers so once.
                    if stalled:
                        raise LakeError(f"broker {span.broker} makes no progress on {span.topic} queue "
                                        f"{span.queue_id} at offset {asked}")
                    stalled = True
                else:
                    offset, stalled = raw.next_begin_offset, False
            if bodies:
                # One decode for the chain's answers: the records are whole, one after another.
                batch = self._hot_rows(decode_pulled_body(b"".join(bodies)), span)
                if batch.num_rows:
                    yield batch

    def _hot_rows(self, batch: pa.RecordBatch, span: HotSpan) -> pa.RecordBatch:
        """The pulled rows inside the span and past the lake's end, matching the filters."""
        inside = pc.and_(pc.less(batch.column("queue_offset"), span.end),
                         pc.greater_equal(batch.column("commitlog_offset"), span.lake_end))
        return self.pushed.apply(rows_where(batch, inside).cast(SPARK_ARROW_SCHEMA))

