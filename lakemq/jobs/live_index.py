"""Key look-ups on the hot side of a ``lakemq`` source read: when the pushed filters restrict
``keys`` to a finite set, the rows past the lake's end are asked of each broker's key index
(QUERY_MESSAGE, one request per key) instead of pulling every message of every queue's tail.

The answer is the cut a pull would give, or the caller pulls:

- complete up to the planned max offsets: a broker indexes a record's keys before its
  ConsumeQueue entry raises the queue's max offset (lakemq.store.message_store), and the
  look-up is made after planning read those offsets, of the master (a slave's index follows
  its master's; the master's holds at least what any member answered at planning);
- complete from the lake's end: the broker says from which CommitLog offset its index holds
  every keyed record (``indexWholeFrom``: records it dispatched since it started, none while
  it drops keys, nothing with the index off); the hot rows are those at or past the lake's
  end for that broker, so that offset must not lie past it;
- not cut short: a broker answers at most ``maxMsgsNumBatch`` messages a key and says when the
  index held that many (``indexCut``); a cut answer, or one that says neither, is not used.

Anything else (an error, no master) also leaves the range to the pull. The records found are
decoded as pulled ones are, each kept once (two keys asked may find one message), inside the
planned spans (queue id, queue offset in [start, end), CommitLog offset at or past the lake's
end), then filtered by the pushed filters (the whole ``keys`` value).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from lakemq.client.client_api import MQClientAPI, RawQueryResult
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.sync import background_loop
from lakemq.errors import BrokerError, LakeMQError, RemotingError
from lakemq.jobs.decode import decode_pulled_body
from lakemq.jobs.live_filters import Pushed, rows_where
from lakemq.jobs.live_plan import HotSpan
from lakemq.tiering.tables import SPARK_ARROW_SCHEMA

__all__ = ["INDEX_ASK", "IndexPart", "QueueRange", "in_ranges", "index_rows"]

INDEX_ASK = 2**31 - 1  # messages asked per key: as many as the broker answers (its maxMsgsNumBatch caps it)
_NO_END = 2**63 - 1
# (queue id, start, end, store hosts): queue offsets [start, end) of one broker's queue, whose
# rows carry one of the store hosts (None: any, where only one broker's rows can be there).
QueueRange = tuple[int, int, int, tuple[str, ...] | None]


@dataclass
class IndexPart(InputPartition):
    """The hot spans of one topic on one broker, read by key look-ups."""

    spans: tuple[HotSpan, ...]


def in_ranges(batch: pa.RecordBatch, ranges: Iterable[QueueRange]) -> pa.Array:
    """Rows whose (queue_id, queue_offset) fall in one of ``ranges`` (queue id, start, end,
    store hosts) and whose store host is among the range's (any, when they are None)."""
    queue, offset = batch.column("queue_id"), batch.column("queue_offset")
    mask = pa.array([False] * batch.num_rows)
    for queue_id, start, end, hosts in ranges:
        inside = pc.and_(pc.equal(queue, queue_id), pc.and_(pc.greater_equal(offset, start), pc.less(offset, end)))
        if hosts is not None:
            inside = pc.and_(inside, pc.is_in(batch.column("store_host"), pa.array(hosts, pa.string())))
        mask = pc.or_(mask, inside)
    return mask


async def _look_up(api: MQClientAPI, addr: str, topic: str, keys: list[str]) -> list[RawQueryResult]:
    # The whole time range, whatever the store_timestamp filters (applied to the rows found): an
    # IndexFile entry's time is clamped to its file's begin after a wall clock step back, so a
    # window could leave out a message stored inside it.
    return list(await asyncio.gather(*(api.query_message_raw(addr, topic, key, max_num=INDEX_ASK, begin_ms=0,
                                                             end_ms=_NO_END) for key in keys)))


def _unusable(answer: RawQueryResult, key: str, lake_end: int) -> str | None:
    """Why ``answer`` may lack a matching row of the hot tail (which begins at CommitLog
    offset ``lake_end``); None when it cannot."""
    header = answer.header
    if header.index_whole_from is None:
        return "it does not say its index holds every key (index off, keys dropped, or an older broker)"
    if header.index_whole_from > max(lake_end, 0):
        return (f"its index holds every key from CommitLog offset {header.index_whole_from}, past the lake's "
                f"end {lake_end}")
    if header.index_cut is not False:
        return f"its index held more messages for key {key!r} than it answers at once"
    return None


def index_rows(consumer: PullConsumer, spans: tuple[HotSpan, ...], pushed: Pushed) -> pa.RecordBatch | str:
    """The rows of ``spans`` (one topic on one broker) that match ``pushed``, from the master's
    key index; or, when the index cannot answer exactly, why not (the caller pulls)."""
    keys = pushed.key_lookups
    first = spans[0]
    if keys is None:
        return "no key to look up"
    instance = consumer.core.instance
    ordered = sorted(keys)
    try:
        addr = asyncio.run_coroutine_threadsafe(
            instance.broker_addr(first.broker, first.topic, master_only=True), background_loop()).result(30)
        answers = asyncio.run_coroutine_threadsafe(
            _look_up(instance.api, addr, first.topic, ordered), background_loop()).result(60)
    except (RemotingError, BrokerError, LakeMQError, TimeoutError) as exc:
        return f"broker {first.broker} failed a key look-up on {first.topic}: {exc}"
    for key, answer in zip(ordered, answers, strict=True):
        why = _unusable(answer, key, first.lake_end)
        if why is not None:
            return f"broker {first.broker} ({addr}) on {first.topic}: {why}"
    body = b"".join(a.body for a in answers)
    if not body:
        return pa.RecordBatch.from_pylist([], schema=SPARK_ARROW_SCHEMA)
    batch = decode_pulled_body(body)
    phys = batch.column("commitlog_offset").to_numpy(zero_copy_only=False)
    once = np.zeros(len(phys), dtype=bool)
    once[np.unique(phys, return_index=True)[1]] = True
    inside = pc.and_(pc.and_(pa.array(once), pc.greater_equal(batch.column("commitlog_offset"), first.lake_end)),
                     in_ranges(batch, ((s.queue_id, s.start, s.end, None) for s in spans)))
    return pushed.apply(rows_where(batch, inside).cast(SPARK_ARROW_SCHEMA))
