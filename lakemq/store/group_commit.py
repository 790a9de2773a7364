"""SYNC_FLUSH group commit: the acknowledgement condition "flushed locally up to X".

The fdatasyncs are the compiled commit thread's (lakemq/store/_group_commit.pyx): every put
publishes its end to it (:meth:`GroupCommit.expect`), and it flushes whatever was published,
one fdatasync after another, without the GIL, so appends on the event loop and flushes
overlap. After every fdatasync it writes the eventfds it was given (PutAcks' or its watches');
whoever then releases puts calls :meth:`GroupCommit.advance`, which moves the CommitLog's
``flushed_where``, the checkpoint's store time and the flush metrics. Which puts that answers,
and when a put times out, is PutAcks' business (lakemq.store.acks); a blocking put waits on
the commit thread itself (:meth:`GroupCommit.wait`, in C without the GIL).

An event loop that appends the puts it answers (the broker's) flushes them itself instead
(:meth:`GroupCommit.flush_inline`): its puts publish without waking the thread, and once per
turn of the loop, after every request its reads brought, one fdatasync on the loop covers
them all and the loop acknowledges them, as redis does under ``appendfsync always``. That
saves the thread's wake-up, its eventfd and the loop's own wake-up per flush, and a flush
covers a whole turn's puts (docs/SYNC_FLUSH.md has the figures). The loop is blocked for the
fdatasync, so a slow one (over ``_INLINE_SLOW_NS``) hands the loop's flushes back to the
thread for a pause (``_INLINE_PAUSE_FIRST_S``, doubled while they stay slow), as does a slow
disk of the fault tests; a failed one is left to the thread, which retries.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from lakemq.common.faults import slow_disk_ms
from lakemq.store._group_commit import CommitThread
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.flush import FlushListener, final_flush
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import PutMessageStatus

__all__ = ["GroupCommit"]

log = logging.getLogger(__name__)

_INLINE_SLOW_NS = 20_000_000  # an fdatasync on the loop slower than this: the disk is busy
# Then the commit thread flushes the loop's puts for a while: 1 s after a lone slow one (a
# hiccup of the host's disk), twice as long after each slow one that follows a pause, up to a
# minute; a fast inline flush starts the count again.
_INLINE_PAUSE_FIRST_S = 1.0
_INLINE_PAUSE_MAX_S = 60.0
_get_ident = threading.get_ident


class GroupCommit:
    """The CommitLog's flush service under SYNC_FLUSH, and the condition PutAcks waits on."""

    timeout_status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    timeout_s: float | None = None  # PutAcks' own: syncFlushTimeout
    may_refuse = False  # a failing fdatasync is retried: refusal() is always None

    def __init__(self, queue: MappedFileQueue, checkpoint: StoreCheckpoint | None = None) -> None:
        self._queue = queue
        self._checkpoint = checkpoint
        self._published = 0  # the flushed offset last written to the checkpoint
        self.flush_listener: FlushListener | None = None
        self._commit = CommitThread(queue.flushed_where)
        self._publish = self._commit.publish  # bound once: called for every put
        self._publish_deferred = self._commit.publish_deferred
        self._inline_thread: int | None = None
        self._inline_request: Callable[[], None] | None = None
        self._inline_due = False
        self._inline_paused_until = 0.0  # monotonic; the loop flushes inline again from then on
        self._inline_pause_s = 0.0  # the next pause's length; 0: the first's
        self._advance_lock = threading.Lock()  # PutAcks' thread and watches' owners both advance
        # (store time, end offset) read in that order: once flushed_where passes the end,
        # a record of that store time is durable (the checkpoint's physic timestamp).
        self._stamp: tuple[int, int] | None = None
        self._reported_error = 0

    @property
    def flush_count(self) -> int:
        return self._commit.flush_count

    def start(self) -> None:
        queue = self._queue
        for mf in queue.mapped_files:
            if mf.file_end_offset > queue.flushed_where:
                self._commit.add_file(mf.fileno(), mf.file_from_offset, mf.file_end_offset)
        queue.on_file_created = self._file_created
        self._commit.delay_us = slow_disk_ms() * 1000
        self._commit.start()

    def flush_inline(self, request: Callable[[], None] | None) -> None:
        """Flush the calling thread's puts on that thread (an event loop's) instead of waking
        the commit thread for them: after the first of its puts since the last flush the group
        commit calls ``request()``, which must see that :meth:`flush_now` runs on this thread
        once the requests at hand are appended. Puts from other threads still wake the commit
        thread. ``None`` ends it (on the thread that flushes)."""
        self._inline_request = request
        self._inline_due = False
        self._inline_thread = _get_ident() if request is not None else None
        if request is None:
            self._commit.kick()  # what it published and did not flush yet

    def _file_created(self, mf: MappedFile) -> None:
        self._commit.add_file(mf.fileno(), mf.file_from_offset, mf.file_end_offset)

    def shutdown(self) -> None:
        """The commit thread flushes everything published and ends; then a last flush of our
        own, retried if the disk is slow."""
        self._commit.stop()
        self.advance()
        final_flush(self._queue, self.flush_listener, self._checkpoint)

    def flush_now(self, quiet_fd: int = -1) -> None:
        """The inline flush (see :meth:`flush_inline`): an fdatasync of every put published,
        on the calling thread, told to every eventfd but ``quiet_fd`` (its caller releases
        the acknowledgements itself). Puts it does not flush go to the commit thread."""
        self._inline_due = False
        commit = self._commit
        if commit.delay_us or self._inline_paused_until:
            commit.kick()
            return
        took = commit.flush_published(quiet_fd)
        if took < 0:  # failed: the commit thread retries, and the next advance reports it
            commit.kick()
        elif took > _INLINE_SLOW_NS:
            pause = self._inline_pause_s or _INLINE_PAUSE_FIRST_S
            self._inline_paused_until = time.monotonic() + pause
            self._inline_pause_s = min(pause * 2, _INLINE_PAUSE_MAX_S)
            log.warning("group commit: an fdatasync on the event loop took %.1f ms; the commit thread "
                        "flushes the loop's puts for the next %g s", took / 1e6, pause)
        else:
            self._inline_pause_s = 0.0

    # -- the acknowledgement condition (lakemq.store.acks.AckCondition) -----------------------

    def expect(self, end: int) -> None:
        """A put ending at ``end`` was appended (every put, on the thread that made it)."""
        if self._inline_thread == _get_ident() and not self._commit.delay_us and (
                not self._inline_paused_until or self._inline_resumed()):
            self._publish_deferred(end)
            if not self._inline_due:
                self._inline_due = True
                self._inline_request()  # type: ignore[misc]
        else:
            self._publish(end)

    def _inline_resumed(self) -> bool:
        if time.monotonic() < self._inline_paused_until:
            return False
        self._inline_paused_until = 0.0
        return True

    def advance(self) -> int:
        with self._advance_lock:
            return self._advance_locked()

    def _advance_locked(self) -> int:
        commit, queue = self._commit, self._queue
        commit.delay_us = slow_disk_ms() * 1000  # fault tests change it while running
        error = commit.error
        if error != self._reported_error:
            self._reported_error = error
            if error:
                log.error("group commit: fdatasync of the CommitLog failed: %s; retrying", os.strerror(error))
        flushed = queue.flushed_where = max(queue.flushed_where, commit.flushed)
        if self._checkpoint is not None and flushed > self._published:
            # How far tiering may read while we run (``wait`` moves flushed_where too, so not "if moved").
            self._checkpoint.publish_flushed(flushed)
            self._published = flushed
        stamp = self._stamp
        if stamp is not None and flushed >= stamp[1]:
            queue.store_timestamp = stamp[0]
            if self._checkpoint is not None and stamp[0]:
                self._checkpoint.physic_msg_timestamp = stamp[0]
            stamp = self._stamp = None
        if stamp is None:
            last = queue.get_last_mapped_file(need_create=False)
            if last is not None and last.store_timestamp:
                self._stamp = (last.store_timestamp, queue.get_max_offset())
        listener = self.flush_listener
        flushes = commit.take_flushes()
        if listener is not None:
            for seconds, flushed_bytes in flushes:
                listener(seconds, flushed_bytes)
        return flushed

    def wait(self, end: int, timeout_s: float) -> bool:
        commit = self._commit
        commit.kick()  # a blocking put on a thread that flushes inline cannot flush it itself
        if not commit.wait_flushed(end, timeout_s):
            return False
        # The lock only when this put moves flushed_where: of the puts one fdatasync wakes, the
        # first moves it and the rest (blocking threads queueing for the GIL) see it moved.
        if commit.flushed > self._queue.flushed_where:
            with self._advance_lock:
                self._queue.flushed_where = max(self._queue.flushed_where, commit.flushed)
        return True

    def refusal(self) -> PutMessageStatus | None:
        return None  # a failing fdatasync is retried; the puts wait for their deadline

    def notify_fds(self, fds: list[int]) -> None:
        self._commit.set_notify_fds(fds)
