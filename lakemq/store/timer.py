"""TimerMessageService: delivers timer messages at their due time, exactly once (docs/TIMER.md).

Timer messages wait in ``rmq_sys_wheel_timer`` queue 0 (lakemq.store.timer_message). The
service reads that queue as dispatch grows it, keeps the waiting ones in memory ordered by due
time, and puts each back under its real topic and queue when its due time has come: never
before, and within the service's tick (100 ms) after. A recall (RocketMQ 5's RECALL_MESSAGE)
appends a marker to the same queue naming the message (TIMER_DEL_UNIQKEY), and drops it.

Progress survives kill -9: ``config/timerCheckpoint.json`` (fsynced, replaced atomically)
holds ``floor`` (every queue offset below it is delivered or recalled), ``scanned`` and
``readTime``: every message below ``scanned`` due at or before ``readTime`` was delivered or
recalled. It is written only once the CommitLog is flushed past the last delivered copy. On
start the queue is read again from ``floor``: a message the checkpoint covers is skipped, one
due in the future cannot have been delivered (never early), and one due by now may have been
delivered after the checkpoint was written: its copy is looked up in the real topic by its
UNIQ_KEY (the store's index) before it is delivered, so none is delivered twice.

A message whose record left the hot tier before it was due is the lake's delay sweep's.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Final

from lakemq.common.message import MessageConst, MessageExt, MessageExtBrokerInner
from lakemq.store.consume_queue import ConsumeQueue
from lakemq.store.results import PutMessageResult
from lakemq.store.schedule import restore_real_message
from lakemq.store.service_thread import ServiceThread
from lakemq.store.timer_message import TIMER_TOPIC, delete_key

__all__ = ["RecallOutcome", "TimerCheckpoint", "TimerMessageService", "read_timer_checkpoint"]

log = logging.getLogger(__name__)

TICK_S: Final = 0.1  # how often the queue is read; the lateness bound of a new, soon-due message
RETRY_MS: Final = 1_000  # a re-put that failed is tried again this much later
RECALL_MEMORY_MS: Final = 3_600_000
_SCAN_BATCH: Final = 1_024


@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    floor: int = 0
    scanned: int = 0
    read_time: int = 0

    def to_json(self) -> str:
        return json.dumps({"floor": self.floor, "scanned": self.scanned, "readTime": self.read_time})


def read_timer_checkpoint(path: Path) -> TimerCheckpoint:
    """The checkpoint in ``path``; the empty one when there is none. ValueError when torn."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return TimerCheckpoint(int(raw["floor"]), int(raw["scanned"]), int(raw["readTime"]))
    except FileNotFoundError:
        return TimerCheckpoint()
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc


class RecallOutcome(Enum):
    RECALLED = "recalled"
    ALREADY_DELIVERED = "the message was already delivered"
    ALREADY_RECALLED = "the message was already recalled"
    NOT_FOUND = "no timer message of this handle waits on this broker"
    FAILED = "the recall could not be stored"


@dataclass(slots=True)
class _Waiting:
    due: int
    offset: int  # in the timer queue
    phy: int
    size: int
    key: str  # delete_key(real topic, uniq key)
    verify: bool  # may have been delivered before a crash: look for its copy first


class TimerMessageService(ServiceThread):
    def __init__(
        self,
        *,
        find_queue: Callable[[str, int], ConsumeQueue | None],
        read_message: Callable[[int, int], MessageExt | None],
        put_message: Callable[[MessageExtBrokerInner], PutMessageResult],
        delivered_copy: Callable[[str, str, int], bool],
        flushed_offset: Callable[[], int],
        checkpoint_path: Path,
        flush_interval_ms: int = 1_000,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        """``delivered_copy(topic, uniq_key, due)``: whether ``topic`` holds the delivered copy
        of that timer message; ``flushed_offset()``: where the CommitLog is flushed to."""
        super().__init__("TimerMessageService")
        self._find_queue = find_queue
        self._read_message = read_message
        self._put_message = put_message
        self._delivered_copy = delivered_copy
        self._flushed_offset = flushed_offset
        self.checkpoint_path = Path(checkpoint_path)
        self._flush_interval_ms = flush_interval_ms
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._heap: list[tuple[int, int]] = []  # (due, queue offset)
        self._waiting: dict[int, _Waiting] = {}  # queue offset -> message
        self._by_key: dict[str, int] = {}  # delete key -> queue offset
        # Recalled keys -> due time, to answer a second recall; forgotten RECALL_MEMORY_MS after
        # the due time (a restart forgets those below the floor too).
        self._recalled: dict[str, int] = {}
        self._scanned = 0
        self._recovered = TimerCheckpoint()
        self._last_copy_end = 0  # CommitLog end of the last delivered copy or recall marker
        self._first_scan_end = 0  # the timer queue's end at start: messages past it are new
        self._pending: tuple[TimerCheckpoint, int] | None = None  # taken, not yet saved
        self.delivered = 0

    # -- state -------------------------------------------------------------------------------

    def load(self) -> bool:
        try:
            self._recovered = read_timer_checkpoint(self.checkpoint_path)
        except ValueError as exc:
            log.error("%s", exc)
            return False
        self._scanned = self._recovered.floor
        return True

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def checkpoint(self) -> tuple[TimerCheckpoint, int]:
        """What may be saved now (every message below ``scanned`` not waiting is done), and the
        CommitLog offset that must be flushed first: the end of the last copy or marker."""
        with self._lock:
            now = self._now_ms()
            floor, due_first = self._scanned, now + 1
            for key in [k for k, due in self._recalled.items() if due < now - RECALL_MEMORY_MS]:
                del self._recalled[key]
            for item in self._waiting.values():  # the heap's order is not theirs (retries, recalls)
                floor = min(floor, item.offset)
                due_first = min(due_first, item.due)
            return TimerCheckpoint(floor, self._scanned, min(now, due_first - 1)), self._last_copy_end

    def persist(self, *, fresh: bool = False) -> bool:
        """Save the checkpoint taken at the previous call (``fresh``: taken now) once the
        CommitLog is flushed past every copy delivered before it was taken; False when it is
        not yet (nothing written). Then take the next one: under a steady flow of deliveries
        the saved state trails by one call, never past what the disk holds."""
        if fresh or self._pending is None:
            self._pending = self.checkpoint()
        state, copy_end = self._pending
        if self._flushed_offset() < copy_end:
            return False
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_name(self.checkpoint_path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(state.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.checkpoint_path)
        dir_fd = os.open(self.checkpoint_path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._pending = self.checkpoint()
        return True

    def persist_quietly(self, *, fresh: bool = False) -> None:
        try:
            self.persist(fresh=fresh)
        except OSError as exc:
            log.error("cannot persist %s: %s", self.checkpoint_path, exc)

    # -- reading the timer queue -------------------------------------------------------------

    def scan(self) -> int:
        """Take in what dispatch added to the timer queue; returns how many messages. A recall
        scans too (on its own thread), so one scan runs at a time."""
        with self._scan_lock:
            return self._scan()

    def _scan(self) -> int:
        cq = self._find_queue(TIMER_TOPIC, 0)
        if cq is None:
            return 0
        taken = 0
        offset = max(self._scanned, cq.get_min_offset_in_queue())
        end = cq.get_max_offset_in_queue()
        while offset < end:
            units = cq.read_units(offset, min(_SCAN_BATCH, end - offset))
            if not units:
                break
            for unit in units:
                if not unit.is_blank:
                    msg = self._read_message(unit.commit_log_offset, unit.size)
                    if msg is None:
                        log.warning("timer queue offset %d: record at %d is gone (the lake's delay sweep "
                                    "delivers it)", offset, unit.commit_log_offset)
                    else:
                        taken += self._take(offset, unit.commit_log_offset, unit.size, msg)
                offset += 1
            with self._lock:
                self._scanned = offset
        return taken

    def _take(self, offset: int, phy: int, size: int, msg: MessageExt) -> int:
        props = msg.properties
        marker = props.get(MessageConst.TIMER_DEL_UNIQKEY)
        with self._lock:
            if marker is not None:
                try:
                    self._recalled[marker] = int(props[MessageConst.TIMER_OUT_MS])
                except (KeyError, ValueError):
                    self._recalled[marker] = self._now_ms()
                found = self._by_key.pop(marker, None)
                if found is not None:
                    self._waiting.pop(found, None)
                return 0
            try:
                due = int(props[MessageConst.TIMER_OUT_MS])
            except (KeyError, ValueError):
                log.warning("timer queue offset %d: no due time, dropped", offset)
                return 0
            done = self._recovered
            if offset < done.scanned and due <= done.read_time:
                return 0  # delivered or recalled before the checkpoint
            key = delete_key(props.get(MessageConst.REAL_TOPIC, ""), msg.unique_key or msg.msg_id)
            if key in self._recalled:
                return 0
            # Not covered by the checkpoint: delivered already only if it was in the queue before
            # this start and is due by now (a copy is never early).
            verify = offset < self._first_scan_end and due <= self._now_ms()
            self._waiting[offset] = _Waiting(due, offset, phy, size, key, verify)
            self._by_key[key] = offset
            heapq.heappush(self._heap, (due, offset))
            return 1

    # -- delivery ----------------------------------------------------------------------------

    def deliver_due(self) -> int:
        """Deliver every waiting message due by now; returns how many were put."""
        put = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > self._now_ms():
                    return put
                _, offset = heapq.heappop(self._heap)
                item = self._waiting.get(offset)
                if item is None:  # recalled
                    continue
                outcome = self._deliver(item)
                if outcome is None:  # retry later
                    heapq.heappush(self._heap, (self._now_ms() + RETRY_MS, offset))
                    return put
                del self._waiting[offset]
                self._by_key.pop(item.key, None)
                put += outcome

    def _deliver(self, item: _Waiting) -> int | None:
        """Put ``item`` back under its real topic: 1 when put, 0 when there was nothing to put
        (gone from the hot tier, or its copy is there already), None when the put failed."""
        msg = self._read_message(item.phy, item.size)
        if msg is None:
            log.warning("timer message at %d is gone before delivery (the lake's delay sweep delivers it)", item.phy)
            return 0
        inner = restore_real_message(msg)
        # As RocketMQ's timer, unlike its delay levels: the copy is the message as it was sent,
        # plus TIMER_OUT_MS.
        inner.properties.pop(MessageConst.REAL_TOPIC, None)
        inner.properties.pop(MessageConst.REAL_QUEUE_ID, None)
        if item.verify and self._delivered_copy(inner.topic, msg.unique_key or msg.msg_id, item.due):
            log.info("timer message %s of %s was delivered before the restart", msg.unique_key, inner.topic)
            return 0
        try:
            result = self._put_message(inner)
        except Exception:
            log.exception("timer message at %d: re-put failed", item.phy)
            return None
        if not result.is_ok or result.append_result is None:
            log.warning("timer message at %d: re-put returned %s %s", item.phy, result.status.name, result.remark)
            return None
        self._last_copy_end = max(self._last_copy_end, result.append_result.next_offset)
        self.delivered += 1
        return 1

    # -- recall ------------------------------------------------------------------------------

    def recall(self, topic: str, uniq_key: str, due_ms: int,
               put_marker: Callable[[str, int], PutMessageResult]) -> RecallOutcome:
        """Cancel the timer message ``uniq_key`` of ``topic`` due at ``due_ms``:
        ``put_marker(delete key, due_ms)`` stores the marker that keeps it recalled after a
        restart. The service's lock is held throughout, so a delivery cannot overtake it.
        The caller makes sure dispatch has seen what was stored before the recall came."""
        key = delete_key(topic, uniq_key)
        self.scan()  # a message sent a moment ago is in the queue, maybe not taken in yet
        with self._lock:
            offset = self._by_key.get(key)
            if offset is None:
                if key in self._recalled:
                    return RecallOutcome.ALREADY_RECALLED
                if due_ms <= self._now_ms():
                    return RecallOutcome.ALREADY_DELIVERED
                return RecallOutcome.NOT_FOUND
            result = put_marker(key, self._waiting[offset].due)
            if not result.is_ok or result.append_result is None:
                log.warning("recall of %s: marker put returned %s %s", key, result.status.name, result.remark)
                return RecallOutcome.FAILED
            self._last_copy_end = max(self._last_copy_end, result.append_result.next_offset)
            del self._waiting[offset]
            del self._by_key[key]
            self._recalled[key] = due_ms
            return RecallOutcome.RECALLED

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> None:
        cq = self._find_queue(TIMER_TOPIC, 0)
        self._first_scan_end = cq.get_max_offset_in_queue() if cq is not None else 0
        self.scan()  # recovered state is complete before the first delivery or recall
        super().start()

    def run(self) -> None:
        next_persist = time.monotonic() + self._flush_interval_ms / 1000
        while not self.stopped:
            try:
                self.scan()
                self.deliver_due()
            except Exception:
                log.exception("timer service pass failed")
            now = time.monotonic()
            if now >= next_persist:
                self.persist_quietly()
                next_persist = now + self._flush_interval_ms / 1000
            with self._lock:
                due_in = (self._heap[0][0] - self._now_ms()) / 1000 if self._heap else TICK_S
            self.wait_for_running(max(0.001, min(TICK_S, due_in)))
