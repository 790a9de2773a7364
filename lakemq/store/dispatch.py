"""Dispatch: the CommitLog read forward in batches of records (parsed in C into columns),
handed to every CommitLogDispatcher (ConsumeQueue builder, IndexFile builder), then long
polling woken.

ReputMessageService runs the loop in a thread. It never spins: when it has caught up it
waits on an event the put path sets (:meth:`ReputMessageService.wakeup`), with a short
timeout as a safety net. A thread that puts often (the broker's event loop) may instead run
the passes itself (:meth:`ReputMessageService.dispatch_now`): no other thread then wakes and
takes the GIL for its puts, and the listeners hear of its messages on its own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from lakemq.common.message import MessageSysFlag
from lakemq.store._scan import scan_records
from lakemq.store.commit_log_scan import DispatchBatch, DispatchRequest, delay_tags_code, requests_of
from lakemq.store.delay_levels import DelayLevels
from lakemq.store.health import StoreHealth
from lakemq.store.service_thread import ServiceThread

__all__ = [
    "Arrival",
    "CommitLogDispatcher",
    "CommitLogReader",
    "DispatchRequest",
    "MessageArrivingListener",
    "ReputMessageService",
    "dispatch_to",
    "gets_consume_queue_entry",
]

log = logging.getLogger(__name__)

# Records read and dispatched per step: large enough to amortize the per-batch work, small
# enough that consumers see the first records of a burst soon.
_BATCH = 1024
# After a pass that found records, the next pass waits this long (RocketMQ's reput runs every
# 1 ms): puts in between join one pass instead of each waking the thread and taking the GIL
# from the network loop. An idle reput is still woken at once by the first put.
_PAUSE_AFTER_WORK_S = 0.001

# One dispatched message that got a ConsumeQueue entry:
# (topic, queue_id, logic offset after the message, tags code, store timestamp).
Arrival = tuple[str, int, int, int, int]
# Told once per dispatched batch, on the reput thread, with the batch's arrivals in CommitLog
# order (never empty). One call per batch, not per message: a listener that hands work to
# another thread does it once per batch, and no properties are parsed for it.
MessageArrivingListener = Callable[[list[Arrival]], None]


class CommitLogDispatcher(Protocol):
    """Builds something from every record. A dispatcher may also offer
    ``dispatch_batch(batch)``, the same for a DispatchBatch of consecutive records at once."""

    def dispatch(self, request: DispatchRequest) -> None: ...


class CommitLogReader(Protocol):
    """The part of the CommitLog the reput reads through."""

    def get_min_offset(self) -> int: ...

    def get_max_offset(self) -> int: ...

    def get_data(self, offset: int) -> memoryview | None:
        """The written bytes from ``offset`` to the end of the file holding it."""

    def roll_next_file(self, offset: int) -> int: ...


def gets_consume_queue_entry(sys_flag: int) -> bool:
    """Prepared and rollback records stay out of the ConsumeQueue: consumers never see them."""
    return MessageSysFlag.transaction_value(sys_flag) in (
        MessageSysFlag.TRANSACTION_NOT_TYPE,
        MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    )


def dispatch_to(dispatchers: list[CommitLogDispatcher], request: DispatchRequest) -> None:
    for dispatcher in dispatchers:
        dispatcher.dispatch(request)


class ReputMessageService(ServiceThread):
    """Reads the CommitLog from ``reput_from_offset`` and dispatches every record."""

    def __init__(
        self,
        commit_log: CommitLogReader,
        dispatchers: list[CommitLogDispatcher],
        *,
        reput_from_offset: int,
        delay_levels: DelayLevels | None,
        listeners: list[MessageArrivingListener] | None = None,
        wait_interval_s: float = 0.05,
        health: StoreHealth | None = None,
    ) -> None:
        super().__init__("ReputMessageService")
        self._commit_log = commit_log
        self.dispatchers = dispatchers
        self.listeners = listeners if listeners is not None else []
        self.reput_from_offset = reput_from_offset
        self._stuck_at = -1
        self._delay_tags_code = delay_tags_code(delay_levels) if delay_levels is not None else None
        self._wait_interval_s = wait_interval_s
        self._health = health  # told of failing passes: puts are refused while dispatch fails
        self._failing = False  # the last pass (any thread's) failed
        self._lock = threading.Lock()  # one pass at a time (thread, recovery, shutdown drain)

    def dispatch_behind_bytes(self) -> int:
        return max(0, self._commit_log.get_max_offset() - self.reput_from_offset)

    def do_reput(self) -> int:
        """Dispatch everything written so far; returns the number of records dispatched."""
        with self._lock:
            return self._do_reput()

    def dispatch_now(self) -> None:
        """One pass on the calling thread, unless a pass is running on another: then the
        service thread is woken for one more pass (the running one may have read the end of
        the CommitLog before the caller's puts), so no record waits for the safety net."""
        if not self._lock.acquire(blocking=False):
            self.wakeup()
            return
        try:
            self._do_reput()
        except Exception as exc:  # noqa: BLE001 - logged and reported to StoreHealth in _pass_failed
            self._pass_failed(exc)
            self.wakeup()  # the reput thread retries
        else:
            self._pass_done()
        finally:
            self._lock.release()

    def _pass_failed(self, exc: Exception) -> None:
        if not self._failing:  # a failure that repeats every pass (a full disk) is logged once
            log.error("reput pass failed at offset %d; puts are refused until it resumes; retrying",
                      self.reput_from_offset, exc_info=exc)
        self._failing = True
        if self._health is not None:
            self._health.dispatch_failed(self.reput_from_offset, exc)

    def _pass_done(self) -> None:
        if self._failing:
            log.warning("reput resumed at offset %d; puts are taken again", self.reput_from_offset)
            if self._health is not None:
                self._health.dispatch_resumed()
        self._failing = False

    def _do_reput(self) -> int:
        done = 0
        min_offset = self._commit_log.get_min_offset()
        if self.reput_from_offset < min_offset:
            log.warning("reput offset %d below the CommitLog's min %d; moving up", self.reput_from_offset, min_offset)
            self.reput_from_offset = min_offset
        while self.reput_from_offset < self._commit_log.get_max_offset():
            data = self._commit_log.get_data(self.reput_from_offset)
            if data is None:
                break
            pos = 0
            stop = 1
            while pos < len(data) and stop == 1:
                # In bulk: one pass reads many records, each dispatcher takes them at once.
                batch = scan_records(data, pos, self.reput_from_offset + pos, _BATCH,
                                     delay_tags_code=self._delay_tags_code)
                pos, stop = batch.end_pos, batch.stop
                if len(batch):
                    self._dispatch_batch(batch)
                    done += len(batch)
            self.reput_from_offset += pos
            if stop == 0:  # blank tail: on to the next file
                self.reput_from_offset = self._commit_log.roll_next_file(self.reput_from_offset)
                continue
            if stop < 0 and self._stuck_at != self.reput_from_offset:
                self._stuck_at = self.reput_from_offset
                log.error("reput stuck at %d: bad record", self.reput_from_offset)
            if pos == 0 or stop < 0:
                break
        return done

    def _dispatch_batch(self, batch: DispatchBatch) -> None:
        requests: list[DispatchRequest] | None = None  # made once, only when someone takes them one by one
        for dispatcher in self.dispatchers:
            dispatch_batch = getattr(dispatcher, "dispatch_batch", None)
            if dispatch_batch is not None:
                dispatch_batch(batch)
                continue
            if requests is None:
                requests = requests_of(batch)
            for request in requests:
                dispatcher.dispatch(request)
        if self.listeners:
            arrivals = batch.arrivals()
            if arrivals:
                for listener in self.listeners:
                    try:
                        listener(arrivals)
                    except Exception:  # a listener bug must not stop dispatch
                        log.exception("message arriving listener failed")

    def run(self) -> None:
        while not self.stopped:
            try:
                done = self.do_reput()
            except Exception as exc:  # noqa: BLE001 - logged and reported to StoreHealth in _pass_failed
                self._pass_failed(exc)
                done = 0
            else:
                self._pass_done()
            if done:
                self._stop_event.wait(_PAUSE_AFTER_WORK_S)
            # Caught up: sleep until a put wakes us. Puts whose thread dispatches them itself
            # (dispatch_now) do not, so this thread does not take their passes from it.
            self.wait_for_running(self._wait_interval_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop after dispatching what has been written (RocketMQ waits up to 5 s for that)."""
        for _ in range(50):
            if self.dispatch_behind_bytes() == 0:
                break
            self.wakeup()
            self._stop_event.wait(0.1)
        super().shutdown(timeout_s)
