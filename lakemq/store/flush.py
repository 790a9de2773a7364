"""Flushing the CommitLog: the timed flusher of ASYNC_FLUSH, and what both flush services share.

Neither flush service ever runs under the append lock: the appender only publishes bytes and
positions; the timed flusher here, or the group commit's compiled commit thread
(lakemq.store.group_commit, SYNC_FLUSH), fdatasyncs what has been published.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.service_thread import ServiceThread

__all__ = ["FlushCommitLogService", "FlushListener", "FlushRealTimeService", "final_flush", "flush_once"]

# A stopping flusher retries this many times so a slow disk does not lose the tail.
_SHUTDOWN_FLUSH_RETRIES = 10

# Told after every flush that wrote something: (seconds it took, bytes it made durable).
FlushListener = Callable[[float, int], None]


class FlushCommitLogService(Protocol):
    flush_listener: FlushListener | None

    def start(self) -> None: ...
    def shutdown(self) -> None:
        """Flush everything appended, then stop."""
        ...


def flush_once(queue: MappedFileQueue, least_pages: int, listener: FlushListener | None,
               checkpoint: StoreCheckpoint | None) -> bool:
    """Flush if ``least_pages`` are dirty (0: whatever is); tell ``listener`` and stamp the
    checkpoint's store time. True when everything written is flushed."""
    before, started = queue.flushed_where, time.monotonic()
    done = queue.flush(least_pages)
    flushed = queue.flushed_where - before
    if listener is not None and flushed > 0:
        listener(time.monotonic() - started, flushed)
    if checkpoint is not None:
        if queue.store_timestamp:
            checkpoint.physic_msg_timestamp = queue.store_timestamp
        if flushed > 0:
            checkpoint.publish_flushed(queue.flushed_where)  # how far tiering may read while we run
    return done


def final_flush(queue: MappedFileQueue, listener: FlushListener | None, checkpoint: StoreCheckpoint | None) -> None:
    for _ in range(_SHUTDOWN_FLUSH_RETRIES):
        if flush_once(queue, 0, listener, checkpoint):
            return


class FlushRealTimeService(ServiceThread):
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
        super().__init__("FlushRealTimeService")
        self._queue = queue
        self._checkpoint = checkpoint
        self.flush_listener: FlushListener | None = None
        self._interval_s = interval_ms / 1000
        self._least_pages = least_pages
        self._thorough_interval_s = thorough_interval_ms / 1000

    def run(self) -> None:
        last_thorough = time.monotonic()
        while not self.stopped:
            self.wait_for_running(self._interval_s)
            least_pages = self._least_pages
            now = time.monotonic()
            if now >= last_thorough + self._thorough_interval_s:
                last_thorough = now
                least_pages = 0
            flush_once(self._queue, least_pages, self.flush_listener, self._checkpoint)
        final_flush(self._queue, self.flush_listener, self._checkpoint)
