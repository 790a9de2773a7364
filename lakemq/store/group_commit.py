"""SYNC_FLUSH group commit: the acknowledgement condition "flushed locally up to X".

The fdatasyncs are the compiled commit thread's (lakemq/store/_group_commit.pyx): every put
publishes its end to it (:meth:`GroupCommit.expect`), and it flushes whatever was published,
one fdatasync after another, without the GIL, so appends on the event loop and flushes
overlap. After every fdatasync it writes the eventfds it was given (PutAcks' or its watches');
whoever then releases puts calls :meth:`GroupCommit.advance`, which moves the CommitLog's
``flushed_where``, the checkpoint's store time and the flush metrics. Which puts that answers,
and when a put times out, is PutAcks' business (lakemq.store.acks); a blocking put waits on
the commit thread itself (:meth:`GroupCommit.wait`, in C without the GIL).
"""

from __future__ import annotations

import logging
import os
import threading

from lakemq.common.faults import slow_disk_ms
from lakemq.store._group_commit import CommitThread
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.flush import FlushListener, final_flush
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import PutMessageStatus

__all__ = ["GroupCommit"]

log = logging.getLogger(__name__)


class GroupCommit:
    """The CommitLog's flush service under SYNC_FLUSH, and the condition PutAcks waits on."""

    timeout_status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    timeout_s: float | None = None  # PutAcks' own: syncFlushTimeout
    may_refuse = False  # a failing fdatasync is retried: refusal() is always None

    def __init__(self, queue: MappedFileQueue, checkpoint: StoreCheckpoint | None = None) -> None:
        self._queue = queue
        self._checkpoint = checkpoint
        self.flush_listener: FlushListener | None = None
        self._commit = CommitThread(queue.flushed_where)
        self.expect = self._commit.publish  # bound once: called for every put
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

    def _file_created(self, mf: MappedFile) -> None:
        self._commit.add_file(mf.fileno(), mf.file_from_offset, mf.file_end_offset)

    def shutdown(self) -> None:
        """The commit thread flushes everything published and ends; then a last flush of our
        own, retried if the disk is slow."""
        self._commit.stop()
        self.advance()
        final_flush(self._queue, self.flush_listener, self._checkpoint)

    # -- the acknowledgement condition (lakemq.store.acks.AckCondition) -----------------------

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
