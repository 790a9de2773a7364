"""Flushing the CommitLog: group commit for SYNC_FLUSH, a timed flusher for ASYNC_FLUSH.

Neither ever runs under the append lock: the appender only publishes bytes and positions;
these threads msync what has been published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import PutMessageStatus
from lakemq.store.service_thread import ServiceThread

__all__ = ["AckSink", "FlushCommitLogService", "FlushListener", "FlushRealTimeService", "GroupCommitService"]

log = logging.getLogger(__name__)

# A stopping flusher retries this many times so a slow disk does not lose the tail.
_SHUTDOWN_FLUSH_RETRIES = 10


Completion = Callable[[PutMessageStatus], None]
# Takes every acknowledgement one commit produced for it at once: (token, status) pairs, on the
# group-commit thread, so it must be quick and must not raise (an asyncio caller hands the
# whole list to its loop with one call_soon_threadsafe).
AckSink = Callable[[list[tuple[Any, PutMessageStatus]]], None]
# Told after every flush that wrote something: (seconds it took, bytes it made durable).
FlushListener = Callable[[float, int], None]


def _release_parked(acks: list[tuple[Any, PutMessageStatus]]) -> None:
    """The sink of blocking puts: each parks on a lock and reads ``flushed_where`` itself."""
    for lock, _ in acks:
        lock.release()


def _call_each(acks: list[tuple[Any, PutMessageStatus]]) -> None:
    """The sink of single completion callbacks (on_put_async)."""
    for complete, status in acks:
        complete(status)


class FlushCommitLogService(Protocol):
    flush_listener: FlushListener | None

    def start(self) -> None: ...
    def shutdown(self, timeout_s: float = 10.0) -> None: ...
    def on_put(self, next_offset: int, wait: bool) -> PutMessageStatus:
        """Called after an append ending at ``next_offset``, outside the append lock; blocks
        until the put may be acknowledged."""
        ...
    def on_put_async(self, next_offset: int, wait: bool, complete: Completion) -> None:
        """Like on_put without blocking: ``complete(status)`` is called exactly once, maybe
        at once, maybe later on the flush thread (so it must be quick)."""
        ...
    def on_put_acked(self, next_offset: int, wait: bool, sink: AckSink,
                     token: Any) -> PutMessageStatus | None:
        """Like on_put_async for many callers at once: returns the status when it is known
        now; otherwise returns None and later ``sink`` receives ``(token, status)`` in one
        list with every other pending put of that sink the same commit covered."""
        ...


class _Flusher(ServiceThread):
    def __init__(self, name: str, queue: MappedFileQueue, checkpoint: StoreCheckpoint | None) -> None:
        super().__init__(name)
        self._queue = queue
        self._checkpoint = checkpoint
        self.flush_listener: FlushListener | None = None

    def _flush(self, least_pages: int) -> bool:
        before, started = self._queue.flushed_where, time.monotonic()
        done = self._queue.flush(least_pages)
        listener, flushed = self.flush_listener, self._queue.flushed_where - before
        if listener is not None and flushed > 0:
            listener(time.monotonic() - started, flushed)
        if self._checkpoint is not None and self._queue.store_timestamp:
            self._checkpoint.physic_msg_timestamp = self._queue.store_timestamp
        return done

    def _final_flush(self) -> None:
        for _ in range(_SHUTDOWN_FLUSH_RETRIES):
            if self._flush(0):
                return


class GroupCommitService(_Flusher):
    """SYNC_FLUSH: a put is acknowledged once ``flushed_where`` passes its end. Each waiting
    put leaves a request (end offset, deadline, the sink to tell and its token); one
    fdatasync then covers everything appended so far, and the service completes exactly the
    requests it covered, each sink once per commit with the list of its tokens: a parked
    thread per blocking put, but one hand-off per commit for a caller that batches (the
    broker's event loop). While there is more to flush the service goes straight on; puts
    wake it only when it sleeps (an Event.set per put costs more than the rest of the
    hand-off). A request still uncovered at its deadline completes with FLUSH_DISK_TIMEOUT;
    at shutdown, after the last flush, every request still pending completes."""

    def __init__(self, queue: MappedFileQueue, timeout_ms: int, checkpoint: StoreCheckpoint | None = None) -> None:
        super().__init__("GroupCommitService", queue, checkpoint)
        self._timeout_s = timeout_ms / 1000
        self._requests_lock = threading.Lock()
        self._requests: list[tuple[int, float, AckSink, Any]] = []
        self._sleeping = True  # until the loop runs, any put wakes it
        self._closed = False  # set with the last release: no request is taken after it
        self.flush_count = 0

    def on_put(self, next_offset: int, wait: bool) -> PutMessageStatus:
        if not wait or self._queue.flushed_where >= next_offset or self.stopped:
            return self._immediate(next_offset, wait)
        done = threading.Lock()
        done.acquire()
        if self._enqueue(next_offset, _release_parked, done):
            done.acquire(timeout=self._timeout_s)
        if self._queue.flushed_where >= next_offset:
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def on_put_async(self, next_offset: int, wait: bool, complete: Completion) -> None:
        status = self.on_put_acked(next_offset, wait, _call_each, complete)
        if status is not None:
            complete(status)

    def on_put_acked(self, next_offset: int, wait: bool, sink: AckSink,
                     token: Any) -> PutMessageStatus | None:
        if not wait or self._queue.flushed_where >= next_offset or self.stopped:
            return self._immediate(next_offset, wait)
        if self._enqueue(next_offset, sink, token):
            return None
        if self._queue.flushed_where >= next_offset:
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def _immediate(self, next_offset: int, wait: bool) -> PutMessageStatus:
        if not wait:
            if self._sleeping:
                self.wakeup()
            return PutMessageStatus.PUT_OK
        if self._queue.flushed_where >= next_offset:
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.SERVICE_NOT_AVAILABLE

    def _enqueue(self, next_offset: int, sink: AckSink, token: Any) -> bool:
        """False once the service has completed its last requests (a put that raced the
        shutdown): nobody would complete this one, the caller answers it now."""
        with self._requests_lock:
            if self._closed:
                return False
            self._requests.append((next_offset, time.monotonic() + self._timeout_s, sink, token))
        if self._sleeping:
            self.wakeup()
        return True

    def run(self) -> None:
        queue = self._queue
        while not self.stopped:
            self._commit()
            if queue.flushed_where < queue.get_max_offset():
                continue  # appended while flushing: flush again at once
            # Clear, announce, re-check, then wait: a put that saw _sleeping False has queued
            # its request before the re-check; one that saw it True sets the event.
            self._wake_event.clear()
            self._sleeping = True
            if queue.flushed_where >= queue.get_max_offset():
                self._wake_event.wait(0.01)
            self._sleeping = False
        self._final_flush()
        self._release(final=True)

    def _commit(self) -> None:
        if self._queue.flushed_where < self._queue.get_max_offset():
            self._flush(0)
            self.flush_count += 1
        if self._requests:
            self._release(final=False)

    def _release(self, *, final: bool) -> None:
        with self._requests_lock:
            requests, self._requests = self._requests, []
            self._closed = final
        flushed = self._queue.flushed_where
        now = time.monotonic()
        pending = []
        by_sink: dict[AckSink, list[tuple[Any, PutMessageStatus]]] = {}
        ok, timeout = PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT
        for request in requests:
            next_offset, deadline, sink, token = request
            if next_offset <= flushed:
                status = ok
            elif final or now >= deadline:
                status = timeout
            else:
                pending.append(request)
                continue
            acks = by_sink.get(sink)
            if acks is None:
                by_sink[sink] = [(token, status)]
            else:
                acks.append((token, status))
        if pending:
            with self._requests_lock:
                self._requests[:0] = pending
        for sink, acks in by_sink.items():
            try:
                sink(acks)
            except Exception:  # one broken caller must not stop acknowledgements for the rest
                log.exception("group commit: acknowledging %d put(s) failed", len(acks))


class FlushRealTimeService(_Flusher):
    """ASYNC_FLUSH: every ``interval_ms`` flush if at least ``least_pages`` pages are dirty;
    every ``thorough_interval_ms`` flush whatever is dirty."""

    def __init__(
        self,
        queue: MappedFileQueue,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        checkpoint: StoreCheckpoint | None = None,
    ) -> None:
        super().__init__("FlushRealTimeService", queue, checkpoint)
        self._interval_s = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough_interval_s = thorough_interval_ms / 1000

    def on_put(self, next_offset: int, wait: bool) -> PutMessageStatus:
        return PutMessageStatus.PUT_OK

    def on_put_async(self, next_offset: int, wait: bool, complete: Completion) -> None:
        complete(PutMessageStatus.PUT_OK)

    def on_put_acked(self, next_offset: int, wait: bool, sink: AckSink,
                     token: Any) -> PutMessageStatus | None:
        return PutMessageStatus.PUT_OK

    def run(self) -> None:
        last_thorough = time.monotonic()
        while not self.stopped:
            self.wait_for_running(self._interval_s)
            least_pages = self._least_pages
            now = time.monotonic()
            if now >= last_thorough + self._thorough_interval_s:
                last_thorough = now
                least_pages = 0
            self._flush(least_pages)
        self._final_flush()
