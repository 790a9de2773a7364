"""The store's housekeeping threads: ConsumeQueue flushing (and the checkpoint's logics and
index timestamps) and expired-file cleaning (CommitLog, then ConsumeQueue and IndexFile)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.health import StoreHealth
from lakemq.store.index_service import IndexService
from lakemq.store.mapped_file_queue import DELETE_FILES_BATCH_MAX
from lakemq.store.service_thread import ServiceThread

__all__ = ["CleanExpiredFilesService", "FlushConsumeQueueService", "Unconsumed", "UnconsumedProbe"]

log = logging.getLogger(__name__)

# RocketMQ's manual delete (TRIGGER_DELETE_FILES) runs this many clean rounds.
MANUAL_DELETE_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class Unconsumed:
    """The oldest message some consumer group has not consumed yet."""

    commit_log_offset: int
    group: str
    topic: str
    queue_id: int
    queue_offset: int

    def describe(self) -> str:
        return (f"group {self.group} on {self.topic} queue {self.queue_id} at queue offset {self.queue_offset} "
                f"(CommitLog offset {self.commit_log_offset})")


# Where the oldest unconsumed message is (None: every group consumed everything); the broker
# knows the committed offsets, the store asks it.
UnconsumedProbe = Callable[[], Unconsumed | None]


class FlushConsumeQueueService(ServiceThread):
    """Flushes ConsumeQueues every ``flushIntervalConsumeQueue`` ms (all pages every
    ``flushConsumeQueueThoroughInterval``); after a thorough flush the checkpoint learns the
    store time of the newest record whose ConsumeQueue entry is now on disk."""

    def __init__(self, config: StoreConfig, queues: ConsumeQueueStore, index: IndexService | None,
                 checkpoint: StoreCheckpoint) -> None:
        super().__init__("FlushConsumeQueueService")
        self._config = config
        self._queues = queues
        self._index = index
        self._checkpoint = checkpoint
        self._last_thorough_ms = 0

    def flush(self, thorough: bool) -> None:
        stamp = self._queues.last_dispatched_timestamp  # read first: the flush covers at least this
        self._queues.flush(0 if thorough else self._config.flush_consume_queue_least_pages)
        if thorough:
            if stamp:
                self._checkpoint.logics_msg_timestamp = stamp
            if self._index is not None:
                self._checkpoint.index_msg_timestamp = self._index.flushed_timestamp
            self._checkpoint.flush()

    def run(self) -> None:
        interval_s = self._config.flush_interval_consume_queue / 1000
        while not self.stopped:
            self.wait_for_running(interval_s)
            # Monotonic: after a wall-clock step back the checkpoint must not stop advancing.
            now = time.monotonic_ns() // 1_000_000
            thorough = now - self._last_thorough_ms >= self._config.flush_consume_queue_thorough_interval
            if thorough:
                self._last_thorough_ms = now
            try:
                self.flush(thorough)
            except Exception:
                log.exception("ConsumeQueue flush failed")
        self.flush(True)


class CleanExpiredFilesService(ServiceThread):
    """Deletes CommitLog files as RocketMQ's CleanCommitLogService does, then the ConsumeQueue
    and IndexFile files that only point below the CommitLog's new start:

    - files older than ``fileReservedTime`` hours go at ``deleteWhen`` hours, or at any hour
      while the disk is used above ``diskMaxUsedSpaceRatio``;
    - above ``diskSpaceCleanForciblyRatio`` files go before they expire
      (``cleanFileForciblyEnable``), oldest first;
    - never past what was dispatched, nor past the retention guard (with a lake: what the lake
      verifiably holds), nor the file being written.

    A deleted file that held messages some consumer group has not consumed yet (the
    unconsumed probe) is logged at ERROR with the group and counted. Every 100 ms the
    thread also measures the disk and the dispatch lag for :class:`StoreHealth` (disk full:
    puts refused)."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        dispatched_offset: Callable[[], int],
        retention_guard: Callable[[], Callable[[], int] | None],
        health: StoreHealth,
        unconsumed_probe: Callable[[], UnconsumedProbe | None] = lambda: None,
    ) -> None:
        super().__init__("CleanExpiredFilesService")
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._index = index
        self._dispatched_offset = dispatched_offset
        self._retention_guard = retention_guard
        self._health = health
        self._unconsumed_probe = unconsumed_probe
        self._manual_rounds = 0
        # CommitLog files deleted, by why they went ("expired", "forced", "manual"), and how
        # many of them held messages a group had not consumed.
        self.deleted_files: Counter[str] = Counter()
        self.unconsumed_files_deleted = 0

    def trigger_manual_delete(self) -> None:
        self._manual_rounds = MANUAL_DELETE_ROUNDS
        self.wakeup()

    def _is_delete_time(self) -> bool:
        hours = {h.strip() for h in self._config.delete_when.split(";") if h.strip()}
        return time.strftime("%H") in hours

    def max_deletable_offset(self) -> int:
        limit = self._dispatched_offset()
        guard = self._retention_guard()
        if guard is not None:
            limit = min(limit, guard())
        return limit

    def clean_once(self, *, force: bool = False) -> int:
        """One round; returns how many files went (of all kinds). ``force`` deletes what the
        limits allow whatever its age."""
        c = self._config
        self._health.check()
        ratio = self._health.disk_used_ratio
        forcibly = c.clean_file_forcibly_enable and ratio > c.disk_space_clean_forcibly_ratio
        manual = self._manual_rounds > 0
        if manual:
            self._manual_rounds -= 1
        deleted = 0
        if force or manual or ratio > c.disk_max_used_space_ratio or self._is_delete_time():
            reason = "manual" if manual or force else f"disk {ratio:.1f}% used"
            deleted += self._delete_commit_log_files(force or forcibly, reason)
        min_offset = self._commit_log.get_min_offset()
        deleted += self._queues.delete_expired(min_offset)
        if self._index is not None:
            deleted += self._index.delete_expired_file(min_offset)
        return deleted

    def _delete_commit_log_files(self, at_once: bool, reason: str) -> int:
        c = self._config
        expired_ms = c.file_reserved_time * 3_600_000
        files = self._commit_log.mapped_file_queue.mapped_files[:DELETE_FILES_BATCH_MAX]
        now_ms = time.time() * 1000
        expired = [now_ms >= mf.last_modified() * 1000 + expired_ms for mf in files]
        probe = self._unconsumed_probe()
        # Read before deleting: the ConsumeQueue entries of the files still point at them.
        unconsumed = probe() if probe is not None and files else None
        count = self._commit_log.delete_expired_file(expired_ms, self.max_deletable_offset(),
                                                      c.delete_commit_log_files_interval, clean_immediately=at_once)
        for mf, was_expired in zip(files[:count], expired):
            why = "expired" if was_expired else ("manual" if reason == "manual" else "forced")
            self.deleted_files[why] += 1
            if unconsumed is not None and mf.file_end_offset > unconsumed.commit_log_offset:
                self.unconsumed_files_deleted += 1
                log.error("DELETED UNCONSUMED MESSAGES: CommitLog file %s (offsets [%d, %d), %s, %s) held messages "
                          "not consumed yet, from %s", mf.path.name, mf.file_from_offset, mf.file_end_offset,
                          why, reason, unconsumed.describe())
        return count

    def run(self) -> None:
        interval_s = self._config.clean_resource_interval / 1000
        tick_s = min(0.1, interval_s)  # the disk is measured (a statvfs) far more often than files are cleaned
        next_clean = time.monotonic() + interval_s
        while not self.stopped:
            self.wait_for_running(tick_s)
            if self.stopped:
                break
            try:
                if time.monotonic() >= next_clean or self._manual_rounds:
                    next_clean = time.monotonic() + interval_s
                    self.clean_once()
                else:
                    self._health.check()
            except Exception:
                log.exception("cleaning expired files failed")
