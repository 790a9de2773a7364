"""Flushing the CommitLog: group commit for SYNC_FLUSH, a timed flusher for ASYNC_FLUSH.

Neither ever runs under the append lock: the appender only publishes bytes and positions;
the timed flusher, or the group commit's compiled commit thread, fdatasyncs what has been
published.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from lakemq.common.faults import slow_disk_ms
from lakemq.store._group_commit import CommitThread
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import PutMessageStatus
from lakemq.store.service_thread import ServiceThread

__all__ = ["AckSink", "FlushCommitLogService", "FlushListener", "FlushRealTimeService", "FlushWatch", "GroupCommitService"]

log = logging.getLogger(__name__)

# A stopping flusher retries this many times so a slow disk does not lose the tail.
_SHUTDOWN_FLUSH_RETRIES = 10
# The group commit's thread wakes at least this often to time requests out.
_POLL_MS = 10


Completion = Callable[[PutMessageStatus], None]
# Takes every acknowledgement one release produced for it at once: (token, status) pairs, on the
# group-commit thread or a flush watch's owner, so it must be quick and must not raise (an
# asyncio caller on another thread hands the whole list to its loop with one
# call_soon_threadsafe).
AckSink = Callable[[list[tuple[Any, PutMessageStatus]]], None]
# Told after every flush that wrote something: (seconds it took, bytes it made durable).
FlushListener = Callable[[float, int], None]


def _call_each(acks: list[tuple[Any, PutMessageStatus]]) -> None:
    """The sink of single completion callbacks (on_put_async)."""
    for complete, status in acks:
        complete(status)


def _close_commit(commit: CommitThread, notify_fd: int) -> None:
    """A service dropped without a shutdown (never started, in tests): the thread stops
    before its eventfd closes, so it never writes to a reused descriptor."""
    commit.stop()
    os.close(notify_fd)


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
        at once, maybe later on the group-commit thread (so it must be quick)."""
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
    """SYNC_FLUSH: a put is acknowledged once ``flushed_where`` passes its end.

    The fdatasyncs are the compiled commit thread's (lakemq/store/_group_commit.pyx): every
    put publishes its end to it, and it flushes whatever was published, one fdatasync after
    another, without the GIL, so appends on the event loop and flushes overlap. This
    service's thread (or a FlushWatch's owner) hears of each finished flush on an eventfd;
    it moves ``flushed_where`` and completes exactly the requests (end offset, deadline, the
    sink to tell and its token) that the flush covered, each sink once per wake with the
    list of its tokens (one hand-off per commit for a caller that batches, such as an event
    loop). A blocking put waits on the commit thread directly. A request still uncovered at
    its deadline completes with FLUSH_DISK_TIMEOUT; at shutdown the commit thread flushes
    what was published, then every request still pending completes."""

    def __init__(self, queue: MappedFileQueue, timeout_ms: int, checkpoint: StoreCheckpoint | None = None) -> None:
        super().__init__("GroupCommitService", queue, checkpoint)
        self._timeout_s = timeout_ms / 1000
        self._requests_lock = threading.Lock()
        self._requests: list[tuple[int, float, AckSink, Any]] = []
        self._closed = False  # set with the last release: no request is taken after it
        self._advance_lock = threading.Lock()
        self._watches: list[FlushWatch] = []
        self._notify_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._commit = CommitThread(self._notify_fd, queue.flushed_where)
        # Not at exit: a daemon flush thread may still poll the eventfd then.
        weakref.finalize(self, _close_commit, self._commit, self._notify_fd).atexit = False
        # (store time, end offset) read in that order: once flushed_where passes the end,
        # a record of that store time is durable (the checkpoint's physic timestamp).
        self._stamp: tuple[int, int] | None = None

    @property
    def flush_count(self) -> int:
        return self._commit.flush_count

    def start(self) -> None:
        queue = self._queue
        for mf in queue.mapped_files:
            if mf.file_end_offset > queue.flushed_where:
                self._commit.add_file(mf.fileno(), mf.file_from_offset, mf.file_end_offset)
        queue.on_file_created = self._file_created
        super().start()

    def _file_created(self, mf: MappedFile) -> None:
        self._commit.add_file(mf.fileno(), mf.file_from_offset, mf.file_end_offset)

    def open_watch(self, sink: AckSink) -> FlushWatch:
        """For an event loop that acknowledges its own puts (made with ``sink``): a
        FlushWatch whose eventfd is readable after every flush. While a watch is open,
        flushes are announced to the watches only; this service's thread wakes every 10 ms
        and leaves the watched sinks' requests to the watches' owners until their
        deadline, answering every other sink's as before."""
        watch = FlushWatch(self, sink)
        with self._advance_lock:
            self._watches.append(watch)
            self._commit.set_notify_fds([w.fd for w in self._watches])
        return watch

    def _close_watch(self, watch: FlushWatch) -> None:
        with self._advance_lock:
            if watch in self._watches:
                self._watches.remove(watch)
            self._commit.set_notify_fds([w.fd for w in self._watches] or [self._notify_fd])

    def release_flushed(self) -> None:
        """Acknowledge what the commit thread has made durable, on the calling thread (a
        watch's owner calls this when its eventfd is readable)."""
        self._advance()
        if self._requests:
            self._release(final=False)

    def on_put(self, next_offset: int, wait: bool) -> PutMessageStatus:
        if not wait or self.stopped:
            return self._immediate(next_offset, wait)
        # A blocking put waits on the commit thread itself (in C, without the GIL): no
        # request, no hand-off through this service's thread.
        commit = self._commit
        commit.publish(next_offset)
        if not commit.wait_flushed(next_offset, self._timeout_s):
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        with self._advance_lock:
            self._queue.flushed_where = max(self._queue.flushed_where, commit.flushed)
        return PutMessageStatus.PUT_OK

    def on_put_async(self, next_offset: int, wait: bool, complete: Completion) -> None:
        status = self.on_put_acked(next_offset, wait, _call_each, complete)
        if status is not None:
            complete(status)

    def on_put_acked(self, next_offset: int, wait: bool, sink: AckSink,
                     token: Any) -> PutMessageStatus | None:
        if not wait or self.stopped:
            return self._immediate(next_offset, wait)
        return self._enqueue(next_offset, sink, token)

    def _immediate(self, next_offset: int, wait: bool) -> PutMessageStatus:
        self._commit.publish(next_offset)
        if not wait or self._queue.flushed_where >= next_offset:
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.SERVICE_NOT_AVAILABLE

    def _enqueue(self, next_offset: int, sink: AckSink, token: Any) -> PutMessageStatus | None:
        """None once the request is queued; otherwise its status now: flushed already, or
        the service has completed its last requests (a put that raced the shutdown)."""
        self._commit.publish(next_offset)
        with self._requests_lock:
            # Checked under the lock: a release moves flushed_where before it takes
            # the requests, so a request it would not see is answered here.
            if self._queue.flushed_where >= next_offset:
                return PutMessageStatus.PUT_OK
            if not self._closed:
                self._requests.append((next_offset, time.monotonic() + self._timeout_s, sink, token))
                return None
        if self._queue.flushed_where >= next_offset:
            return PutMessageStatus.PUT_OK
        return PutMessageStatus.FLUSH_DISK_TIMEOUT

    def run(self) -> None:
        commit, poller = self._commit, select.poll()
        poller.register(self._notify_fd, select.POLLIN)
        commit.start()
        reported_error = 0
        try:
            while not self.stopped:
                commit.delay_us = slow_disk_ms() * 1000
                notified = bool(poller.poll(_POLL_MS))
                if notified:
                    os.eventfd_read(self._notify_fd)
                self._advance()
                if commit.error != reported_error:
                    reported_error = commit.error
                    if reported_error:
                        log.error("group commit: fdatasync of the CommitLog failed: %s; retrying",
                                  os.strerror(reported_error))
                if self._requests:
                    # A flush announced to the watches is theirs to acknowledge for their
                    # sinks; one that reached this thread (it raced a watch's opening) is ours.
                    self._release(final=False, left_to_watches=not notified)
        finally:
            commit.stop()  # flushes everything published first
            for watch in list(self._watches):
                watch.close()
            self._advance()
            self._final_flush()
            self._release(final=True)

    def _advance(self) -> None:
        """Take what the commit thread made durable: flushed_where, the checkpoint's store
        time, and the flush listener."""
        with self._advance_lock:  # the service thread and watches' owners both advance
            self._advance_locked()

    def _advance_locked(self) -> None:
        queue = self._queue
        queue.flushed_where = max(queue.flushed_where, self._commit.flushed)
        stamp = self._stamp
        if stamp is not None and queue.flushed_where >= stamp[1]:
            queue.store_timestamp = stamp[0]
            if self._checkpoint is not None and stamp[0]:
                self._checkpoint.physic_msg_timestamp = stamp[0]
            stamp = None
        if stamp is None:
            last = queue.get_last_mapped_file(need_create=False)
            if last is not None and last.store_timestamp:
                self._stamp = (last.store_timestamp, queue.get_max_offset())
        listener = self.flush_listener
        flushes = self._commit.take_flushes()
        if listener is not None:
            for seconds, flushed_bytes in flushes:
                listener(seconds, flushed_bytes)

    def _release(self, *, final: bool, left_to_watches: bool = False) -> None:
        """Complete the requests the flushes covered, or whose deadline passed; with
        ``left_to_watches`` a watched sink's requests only once their deadline passed."""
        watched: set[AckSink] = {w.sink for w in self._watches} if left_to_watches else set()
        with self._requests_lock:
            requests, self._requests = self._requests, []
            if final:
                self._closed = True
        flushed = self._queue.flushed_where
        now = time.monotonic()
        pending = []
        by_sink: dict[AckSink, list[tuple[Any, PutMessageStatus]]] = {}
        ok, timeout = PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT
        for request in requests:
            next_offset, deadline, sink, token = request
            if now < deadline and sink in watched:
                pending.append(request)
                continue
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
                closed = self._closed
                if not closed:
                    self._requests[:0] = pending
            if closed:  # the final release ran meanwhile (on the service's thread): answer now
                for _, _, sink, token in pending:
                    by_sink.setdefault(sink, []).append((token, timeout))
        for sink, acks in by_sink.items():
            try:
                sink(acks)
            except Exception:  # one broken caller must not stop acknowledgements for the rest
                log.exception("group commit: acknowledging %d put(s) failed", len(acks))


class FlushWatch:
    """An eventfd readable after every group commit (GroupCommitService.open_watch): its
    owner, an event loop, calls :meth:`on_readable` when it is, and so acknowledges the puts
    the commit covered on its own thread, with no hand-off from another."""

    def __init__(self, service: GroupCommitService, sink: AckSink) -> None:
        self._service = service
        self.sink = sink  # the requests its owner acknowledges
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closed = False

    def on_readable(self) -> None:
        if self._closed:
            return
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:  # already read
            return
        self._service.release_flushed()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop watching; flushes are announced to the service's own thread again."""
        if self._closed:
            return
        self._closed = True
        self._service._close_watch(self)
        os.close(self.fd)


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
