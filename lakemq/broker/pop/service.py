"""PopService: POP consumption (RocketMQ 5's pop/ack/changeInvisibleTime), the broker core
that both protocol faces call: the 4.x remoting processors (lakemq.broker.pop.processor) and
the RocketMQ 5 gRPC front door (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue).

A pop reads a group's next messages of a topic (its queues, and the group's pop retry topic
first) and hides them for ``invisible_ms``: each comes with a receipt handle and its delivery
attempt. Unacked when the time is up, a message is revived: copied to the pop retry topic
with one attempt more, or to the group's DLQ once ``retryMaxTimes`` attempts are spent. FIFO
pops (``fifo``) hold a queue's next messages back until every message delivered from it is
acked or dead-lettered, and deliver an expired one again in place.

Every change is written to the journal (lakemq.broker.pop.journal) before it is applied or
answered; all of them run on one thread, the POP thread, in journal order, so the state a
replay rebuilds is the state that was answered. The event loop only waits: for that thread,
and, in long polling, for messages to arrive or a FIFO queue to free up. docs/POP.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.pop.copies import REVIVED_PROPERTY, put_copy
from lakemq.broker.pop.journal import PopJournal
from lakemq.broker.pop.model import PoppedMessage, PopRequest, PopResult, origin_topic
from lakemq.broker.pop.receipt import ORDER_REVIVE_QID, ReceiptHandle, is_pop_retry_topic, pop_retry_topic
from lakemq.broker.pop.state import InFlight, PopState, QueueKey, QueueState
from lakemq.broker.pop.waiters import PopWaiters
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager, dlq_topic
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageExt
from lakemq.common.record import decode_record
from lakemq.errors import ReceiptHandleError, RecordError, for_code
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore

__all__ = ["MAX_POP_MESSAGES", "PopService"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_REVIVE_BATCH = 256
_REVIVE_IDLE_S = 1.0  # the revive task's longest sleep (it wakes at the earliest deadline)
_SNAPSHOT_EVERY_S = 10.0
_FIFO_RECHECK_S = 0.5  # a held FIFO pop looks again this often: its queue's deadlines pass unannounced
_READ_BYTES = 4 << 20
MAX_POP_MESSAGES: Final = 32  # per pop, as RocketMQ's broker allows (a journal record stays small)
_DEFAULT_MAX_ATTEMPTS = 16  # a group deleted while its messages were in flight
_MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                    GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.MESSAGE_WAS_REMOVING})


class PopService:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, *, cluster: str, broker_name: str, snapshot_path: Path) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._broker_name = broker_name
        self._journal = PopJournal(store, cluster, snapshot_path)
        self._state = PopState()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="PopThread")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: PopWaiters | None = None
        self._acks: list[tuple[str, str, ReceiptHandle, asyncio.Future[None]]] = []
        self._acking = False
        self._last_pop_time = 0
        self._rotation = 0
        self._revive_task: asyncio.Task[None] | None = None
        self._snapshot_at = time.monotonic()

    # -- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the state (snapshot + journal), then revive in the background."""
        self._loop = asyncio.get_running_loop()
        waiters = self._waiters = PopWaiters(self._loop)
        self._state = await self._run(self._journal.recover)
        await self._run(self._settle_unfinished)
        self._store.message_arriving_listeners.append(waiters.on_arrivals)
        self._revive_task = self._loop.create_task(self._revive_forever(), name="pop-revive")

    async def shutdown(self) -> None:
        if self._revive_task is not None:
            self._revive_task.cancel()
            await asyncio.gather(self._revive_task, return_exceptions=True)
        if self._waiters is not None and self._waiters.on_arrivals in self._store.message_arriving_listeners:
            self._store.message_arriving_listeners.remove(self._waiters.on_arrivals)
        await self._run(lambda: self._journal.snapshot(self._state))
        self._thread.shutdown(wait=True)

    # -- the API both faces call -----------------------------------------------------------

    async def pop(self, request: PopRequest) -> PopResult:
        """Up to ``max_messages`` (at most 32) messages, hidden for ``invisible_ms``; with ``poll_ms``, waits
        that long for some when none are there. Raises BrokerError (TOPIC_NOT_EXIST,
        SUBSCRIPTION_GROUP_NOT_EXIST, NO_PERMISSION, a refused journal write)."""
        if request.max_messages <= 0 or request.invisible_ms <= 0:
            raise for_code(ResponseCode.INVALID_PARAMETER, "maxMessages and invisibleTime must be positive")
        deadline = time.monotonic() + request.poll_ms / 1000
        retry_topic = pop_retry_topic(request.group, request.topic)
        while True:
            changed = None
            if request.poll_ms > 0 and self._waiters is not None:
                changed = self._waiters.event(request.topic, retry_topic)
            result = await self._run(lambda: self._pop_now(request))
            remaining = deadline - time.monotonic()
            if result.messages or remaining <= 0 or changed is None:
                return result
            try:
                await asyncio.wait_for(changed.wait(), min(remaining, _FIFO_RECHECK_S) if request.fifo else remaining)
            except TimeoutError:
                pass

    async def ack(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """End the delivery ``handle`` names; ReceiptHandleError if it is already over.

        Acks that arrive while the POP thread is busy are journaled together, in one record
        (one flush under SYNC_FLUSH for all of them)."""
        assert self._loop is not None, "PopService not started"
        done: asyncio.Future[None] = self._loop.create_future()
        self._acks.append((group, topic, handle, done))
        if not self._acking:
            self._acking = True
            self._loop.create_task(self._ack_pump(), name="pop-acks")
        await done

    async def _ack_pump(self) -> None:
        try:
            while self._acks:
                batch, self._acks = self._acks, []
                work = functools.partial(self._ack_now, [(g, t, h) for g, t, h, _f in batch])
                try:
                    outcomes = await self._run(work)
                except Exception as exc:  # noqa: BLE001 - a refused journal write fails every ack of the batch
                    outcomes = [exc] * len(batch)
                for (*_, done), outcome in zip(batch, outcomes, strict=True):
                    if done.done():
                        continue
                    if outcome is None:
                        done.set_result(None)
                    else:
                        done.set_exception(outcome)
        finally:
            self._acking = False

    async def change_invisible(self, group: str, topic: str, handle: ReceiptHandle,
                               invisible_ms: int) -> ReceiptHandle:
        """Hide the message ``invisible_ms`` from now; the new handle replaces ``handle``."""
        if invisible_ms <= 0:
            raise for_code(ResponseCode.INVALID_PARAMETER, "invisibleTime must be positive")
        return await self._run(lambda: self._change_now(group, topic, handle, invisible_ms))

    async def forward_to_dlq(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """Move the message to the group's DLQ now (the client gave up on it)."""
        await self._run(lambda: self._forward_now(group, topic, handle))

    # -- on the POP thread -----------------------------------------------------------------

    def _pop_now(self, req: PopRequest) -> PopResult:
        now = _now_ms()
        self._group(req.group)
        topic_config = self._topics.select_topic_config(req.topic)
        if topic_config is None:
            raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{req.topic}] not exist")
        if not PermName.is_readable(topic_config.perm):
            raise for_code(ResponseCode.NO_PERMISSION, f"the topic[{req.topic}] peeking message is forbidden")
        pop_time = self._last_pop_time = max(now, self._last_pop_time + 1)  # a pop time names a delivery
        result = PopResult(pop_time, req.invisible_ms)
        checkpoints: list[list[Any]] = []
        started: list[list[Any]] = []
        ends: list[dict[str, Any]] = []
        for topic, qid in self._queues(req, topic_config.read_queue_nums):
            wanted = min(req.max_messages, MAX_POP_MESSAGES) - len(result.messages)
            if wanted <= 0:
                break
            key = (req.group, topic, qid)
            qs = self._state.queue(key)
            if qs is None:  # where the group starts goes into the journal, so a restart keeps it
                qs = self._state.start_queue(key, self._first_offset(req, topic, qid))
                started.append([topic, qid, qs.next, []])
            if req.fifo:
                if qs.blocked_fifo(now):
                    continue
                again = self._fifo_again(key, qs, now, ends)
                if again:
                    checkpoints.append([topic, qid, qs.next, again])
                    continue
            entries, next_offset = self._read_new(req, key, qs, wanted)
            if entries:
                checkpoints.append([topic, qid, next_offset, entries])
            result.rest += max(self._store.get_max_offset_in_queue(topic, qid) - next_offset, 0)
        if ends:
            self._record(ends)
        if checkpoints or started:
            self._record([{"k": "pop", "g": req.group, "p": pop_time, "i": req.invisible_ms, "f": req.fifo,
                           "c": [*started,
                                 *([t, q, n, [e[:3] for e in entries]] for t, q, n, entries in checkpoints)]}])
            for topic, qid, _n, entries in checkpoints:
                ck_offset = min(e[0] for e in entries)
                for offset, _clo, attempt, record, msg in entries:
                    handle = ReceiptHandle(ck_offset, pop_time, req.invisible_ms,
                                           ORDER_REVIVE_QID if req.fifo else 0, is_pop_retry_topic(topic),
                                           self._broker_name, qid, offset)
                    result.messages.append(PoppedMessage(record, msg, handle, attempt))
        return result

    def _queues(self, req: PopRequest, read_queue_nums: int) -> list[tuple[str, int]]:
        """The queues a pop reads, in order: the group's pop retry topic first (FIFO has none)."""
        queues: list[tuple[str, int]] = []
        if not req.fifo:
            retry = self._topics.select_topic_config(pop_retry_topic(req.group, req.topic))
            if retry is not None:
                queues += [(retry.topic_name, q) for q in range(retry.read_queue_nums)]
        if req.queue_id is not None:
            return [*queues, (req.topic, req.queue_id)]
        self._rotation += 1  # consumers polling together spread over the queues
        n = max(read_queue_nums, 1)
        return queues + [(req.topic, (self._rotation + i) % n) for i in range(read_queue_nums)]

    def _first_offset(self, req: PopRequest, topic: str, qid: int) -> int:
        committed = self._offsets.query_offset(req.group, topic, qid)
        if committed >= 0:
            return committed
        if req.init_from_min or is_pop_retry_topic(topic):
            first = self._store.get_min_offset_in_queue(topic, qid)
        else:
            first = self._store.get_max_offset_in_queue(topic, qid)
        self._offsets.commit_offset("pop", req.group, topic, qid, first)  # a restart starts there too
        return first

    def _read_new(self, req: PopRequest, key: QueueKey, qs: QueueState, wanted: int) -> tuple[list[list[Any]], int]:
        """The queue's next messages and where the pop after them reads; ``qs.next`` moves
        only with the journal record (a refused write delivers nothing and skips nothing)."""
        _group, topic, qid = key
        got = self._store.get_message(req.group, topic, qid, qs.next, wanted, req.message_filter, _READ_BYTES)
        if got.status is GetMessageStatus.FOUND:
            entries = []
            for record in got.buffers:
                msg = decode_record(record)
                attempt = 1 if req.fifo else msg.reconsume_times + 1
                entries.append([msg.queue_offset, msg.commit_log_offset, attempt, bytes(record), msg])
            return entries, got.next_begin_offset
        if got.status is GetMessageStatus.NO_MATCHED_MESSAGE or got.status in _MOVED:
            if got.status in _MOVED:
                log.info("pop of %s %s:%d moved from %d to %d (%s)", req.group, topic, qid, qs.next,
                         got.next_begin_offset, got.status.name)
            qs.next = got.next_begin_offset  # nothing delivered: no record needed
            self._commit_floor(key, qs)
        return [], qs.next

    def _fifo_again(self, key: QueueKey, qs: QueueState, now: int, ends: list[dict[str, Any]]) -> list[list[Any]]:
        """A FIFO queue's expired deliveries, delivered again in place; those out of attempts
        go to the DLQ instead (``ends`` gets their done record)."""
        group, topic, qid = key
        again: list[list[Any]] = []
        dead: list[int] = []
        for offset in qs.expired_fifo(now):
            entry = qs.inflight[offset]
            record, msg = self._stored(key, offset, entry)
            if record is None or msg is None:
                dead.append(offset)
                continue
            if entry.attempt >= self._max_attempts(group):
                self._to_dlq(group, topic, msg, entry)
                dead.append(offset)
            else:
                again.append([offset, entry.commit_log_offset, entry.attempt + 1, bytes(record), msg])
        if dead:
            ends.append({"k": "done", "g": group, "t": topic, "q": qid, "o": dead, "r": "dlq"})
        return again

    def _stored(self, key: QueueKey, offset: int, entry: InFlight) -> tuple[bytes | None, MessageExt | None]:
        """The delivered message's record, read again; (None, None) when the store no longer
        holds it, or holds another record there (a CommitLog cut by a power loss and written
        again: the journal may name bytes the CommitLog lost)."""
        record = self._store.select_one_message_by_offset(entry.commit_log_offset)
        if record is not None:
            try:
                msg = decode_record(record)
            except RecordError:
                msg = None
            if msg is not None and (msg.topic, msg.queue_id, msg.queue_offset) == key[1:] + (offset,):
                return bytes(record), msg
        log.warning("POP delivery of %s: %s:%d offset %d is gone from the store", key[0], key[1], key[2], offset)
        return None, None

    def _find(self, group: str, topic: str, handle: ReceiptHandle) -> tuple[QueueKey, InFlight]:
        key = (group, handle.real_topic(group, topic), handle.queue_id)
        entry = self._state.find(key, handle.offset)
        if entry is None or entry.pop_time != handle.pop_time:
            raise ReceiptHandleError(f"receipt handle expired: {key[1]}:{handle.queue_id} offset {handle.offset} "
                                     "was acked, hidden again under a newer handle, or delivered again")
        return key, entry

    def _forward_now(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        key, entry = self._find(group, topic, handle)
        _record, msg = self._stored(key, handle.offset, entry)
        if msg is not None:
            self._to_dlq(group, key[1], msg, entry)
        self._record([{"k": "done", "g": group, "t": key[1], "q": key[2], "o": [handle.offset], "r": "dlq"}])

    def _ack_now(self, acks: list[tuple[str, str, ReceiptHandle]]) -> list[Exception | None]:
        """Journal the acks of live deliveries in one record; each ack's outcome."""
        outcomes: list[Exception | None] = []
        records: list[dict[str, Any]] = []
        seen: set[tuple[QueueKey, int]] = set()
        for group, topic, handle in acks:
            try:
                key, _entry = self._find(group, topic, handle)
                if (key, handle.offset) in seen:
                    raise ReceiptHandleError(f"receipt handle acked twice: {key[1]}:{key[2]} offset {handle.offset}")
            except ReceiptHandleError as exc:
                outcomes.append(exc)
                continue
            seen.add((key, handle.offset))
            records.append({"k": "done", "g": group, "t": key[1], "q": key[2], "o": [handle.offset], "r": "ack"})
            outcomes.append(None)
        if records:
            self._record(records)
        return outcomes

    def _change_now(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        key, entry = self._find(group, topic, handle)
        pop_time = self._last_pop_time = max(_now_ms(), self._last_pop_time + 1, entry.pop_time + 1)
        self._record([{"k": "chg", "g": group, "t": key[1], "q": key[2], "o": handle.offset,
                       "p": pop_time, "i": invisible_ms}])
        return ReceiptHandle(entry.ck_offset, pop_time, invisible_ms, handle.revive_qid, handle.retry,
                             self._broker_name, handle.queue_id, handle.offset)

    def _revive_due(self) -> float | None:
        """Revive what is due; the seconds until the next deadline (None: none known).

        The ``rev`` record goes first, naming where each target queue ends; each copy then
        names its delivery (REVIVED_PROPERTY); the done records and the ``end`` close it. A
        revive cut short is settled from the copies it made, so none is made twice."""
        now = _now_ms()
        due = self._state.due(now, _REVIVE_BATCH)
        if due:
            revive_id = self._last_pop_time = max(now, self._last_pop_time + 1)
            plan = []
            for key, offset, entry in due:
                _record, msg = self._stored(key, offset, entry)
                plan.append((key, offset, entry, msg, self._target(key, msg, entry)))
            marks = {target: self._store.get_max_offset_in_queue(target, 0) for *_, target in plan if target}
            try:
                self._record([{"k": "rev", "x": revive_id, "m": marks}])
            except Exception:
                for key, offset, entry, *_ in plan:  # nothing happened: due again at the next turn
                    self._state.due_again(key, offset, entry)
                raise
            ended = [(key, offset) for key, offset, _e, msg, _t in plan if msg is None]
            try:
                for (group, topic, qid), offset, entry, msg, target in plan:
                    if msg is not None and target:
                        put_copy(self._store, self._topics, msg, target=target, queue_nums=1,
                                 origin_topic=origin_topic(topic, msg), reconsume_times=entry.attempt,
                                 revived=f"{revive_id} {group} {topic} {qid} {offset}")
                        ended.append(((group, topic, qid), offset))
            finally:
                self._end_revive(revive_id, ended)
                for key, offset, entry, *_ in plan:
                    if self._state.find(key, offset) is entry:  # its copy failed: due again
                        self._state.due_again(key, offset, entry)
        if len(due) == _REVIVE_BATCH:
            return 0.0
        if self._snapshot_due():
            self._journal.snapshot(self._state)
        return self._until_next(now)

    def _until_next(self, now: int) -> float | None:
        nxt = self._state.next_deadline()
        return None if nxt is None else max(nxt - now, 0) / 1000

    def _target(self, key: QueueKey, msg: MessageExt | None, entry: InFlight) -> str:
        """Where a revived delivery's copy goes: its pop retry topic, or its DLQ when out of attempts."""
        group, topic, _qid = key
        if msg is None:
            return ""
        if entry.attempt >= self._max_attempts(group):
            log.info("message %s of group %s to its DLQ after %d attempts", msg.msg_id, group, entry.attempt)
            return dlq_topic(group)
        return pop_retry_topic(group, origin_topic(topic, msg))

    def _end_revive(self, revive_id: int, ended: list[tuple[QueueKey, int]]) -> None:
        """Close revive ``revive_id``: the deliveries ``ended`` are done."""
        by_queue: dict[QueueKey, list[int]] = {}
        for key, offset in ended:
            by_queue.setdefault(key, []).append(offset)
        self._record([*({"k": "done", "g": g, "t": t, "q": q, "o": o, "r": "revive"}
                        for (g, t, q), o in by_queue.items()),
                      {"k": "end", "x": revive_id}])

    def _settle(self, revive_id: int) -> None:
        """Close a revive a crash cut short (dispatch caught up): the deliveries whose copies
        the target queues hold are done; the others are still in flight, revived again."""
        rev = self._state.reviving[revive_id]
        ended: list[tuple[QueueKey, int]] = []
        prefix = f"{revive_id} "
        for target, start in rev["m"].items():
            offset, end = int(start), self._store.get_max_offset_in_queue(target, 0)
            while offset < end:
                got = self._store.get_message("", target, 0, offset, 256, None, _READ_BYTES)
                if got.status is not GetMessageStatus.FOUND:
                    break
                for record in got.buffers:
                    mark = decode_record(record, read_body=False).properties.get(REVIVED_PROPERTY, "")
                    if mark.startswith(prefix):
                        _x, group, topic, qid, done = mark.split(" ")
                        ended.append(((group, topic, int(qid)), int(done)))
                offset = got.next_begin_offset
        self._end_revive(revive_id, ended)

    def _settle_unfinished(self) -> None:
        """Revives a crash cut short: settled before anything else happens."""
        for revive_id in sorted(self._state.reviving):
            log.warning("settling POP revive %d, cut short by a crash", revive_id)
            self._settle(revive_id)
        self._journal.snapshot(self._state, force=True)

    def _to_dlq(self, group: str, topic: str, msg: MessageExt, entry: InFlight) -> None:
        log.info("message %s of group %s to its DLQ after %d attempts", msg.msg_id, group, entry.attempt)
        put_copy(self._store, self._topics, msg, target=dlq_topic(group), queue_nums=1,
                 origin_topic=origin_topic(topic, msg), reconsume_times=entry.attempt)

    def _record(self, records: list[dict[str, Any]]) -> None:
        """Journal first, then apply, then let held pops look again."""
        self._journal.write(records)
        for record in records:
            self._state.apply(record)
            if record["k"] in ("rev", "end"):
                continue
            group = record["g"]
            if record["k"] == "pop":
                keys = [(group, topic, qid) for topic, qid, *_ in record["c"]]
            else:
                keys = [(group, record["t"], record["q"])]
            for key in keys:
                qs = self._state.queue(key)
                if qs is not None:
                    self._commit_floor(key, qs)
            if record["k"] == "done" and self._waiters is not None:
                self._waiters.wake([record["t"]])  # a FIFO queue may be free

    def _commit_floor(self, key: QueueKey, qs: QueueState) -> None:
        """The group's consumer offset follows the lowest offset not done (admin tools' lag)."""
        group, topic, qid = key
        self._offsets.commit_offset("pop", group, topic, qid, qs.floor())

    def _max_attempts(self, group: str) -> int:
        config = self._groups.find_subscription_group_config(group)
        return config.retry_max_times if config is not None else _DEFAULT_MAX_ATTEMPTS

    def _group(self, group: str) -> SubscriptionGroupConfig:
        config = self._groups.find_subscription_group_config(group)
        if config is None:
            raise for_code(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        return config

    def _snapshot_due(self) -> bool:
        now = time.monotonic()
        if now - self._snapshot_at < _SNAPSHOT_EVERY_S:
            return False
        self._snapshot_at = now
        return True

    # -- the event loop's side -------------------------------------------------------------

    async def _run(self, work: Callable[[], T]) -> T:
        assert self._loop is not None, "PopService not started"
        return await self._loop.run_in_executor(self._thread, work)

    async def _revive_forever(self) -> None:
        while True:
            try:
                wait = await self._run(self._revive_due)
            except Exception:  # a refused write (disk full): tried again later
                log.exception("POP revive failed; trying again")
                wait = _REVIVE_IDLE_S
            await asyncio.sleep(_REVIVE_IDLE_S if wait is None else min(wait, _REVIVE_IDLE_S))


def _now_ms() -> int:
    return int(time.time() * 1000)
