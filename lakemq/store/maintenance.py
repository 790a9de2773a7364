"""The store's housekeeping threads: ConsumeQueue flushing (and the checkpoint's logics and
index timestamps) and expired-file cleaning (CommitLog, then ConsumeQueue and IndexFile)."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.index_service import IndexService
from lakemq.store.service_thread import ServiceThread

__all__ = ["CleanExpiredFilesService", "FlushConsumeQueueService"]

log = logging.getLogger(__name__)

# RocketMQ's manual delete (TRIGGER_DELETE_FILES) runs this many clean rounds.
MANUAL_DELETE_ROUNDS = 20


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
    """Deletes CommitLog files older than ``fileReservedTime`` hours at ``deleteWhen`` hours
    (at any hour when the disk is fuller than ``diskMaxUsedSpaceRatio``), never past what was
    dispatched nor past the retention guard (what tiering has copied to the lake); then the
    ConsumeQueue and IndexFile files that only point below the CommitLog's new start."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        dispatched_offset: Callable[[], int],
        retention_guard: Callable[[], Callable[[], int] | None],
    ) -> None:
        super().__init__("CleanExpiredFilesService")
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._index = index
        self._dispatched_offset = dispatched_offset
        self._retention_guard = retention_guard
        self._manual_rounds = 0

    def trigger_manual_delete(self) -> None:
        self._manual_rounds = MANUAL_DELETE_ROUNDS
        self.wakeup()

    def _is_delete_time(self) -> bool:
        hours = {h.strip() for h in self._config.delete_when.split(";") if h.strip()}
        return time.strftime("%H") in hours

    def _disk_usage_ratio(self) -> float:
        path = Path(self._config.store_path_root_dir)
        usage = shutil.disk_usage(path if path.exists() else path.parent)
        return usage.used / usage.total * 100 if usage.total else 0.0

    def max_deletable_offset(self) -> int:
        limit = self._dispatched_offset()
        guard = self._retention_guard()
        if guard is not None:
            limit = min(limit, guard())
        return limit

    def clean_once(self, *, force: bool = False) -> int:
        """One round; returns how many files went (of all kinds)."""
        disk_full = self._disk_usage_ratio() > self._config.disk_max_used_space_ratio
        manual = self._manual_rounds > 0
        if manual:
            self._manual_rounds -= 1
        deleted = 0
        if force or manual or disk_full or self._is_delete_time():
            deleted += self._commit_log.delete_expired_file(
                self._config.file_reserved_time * 3_600_000,
                self.max_deletable_offset(),
                self._config.delete_commit_log_files_interval,
                clean_immediately=force or (disk_full and self._config.clean_file_forcibly_enable),
            )
        min_offset = self._commit_log.get_min_offset()
        deleted += self._queues.delete_expired(min_offset)
        if self._index is not None:
            deleted += self._index.delete_expired_file(min_offset)
        return deleted

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self._config.clean_resource_interval / 1000)
            if self.stopped:
                break
            try:
                self.clean_once()
            except Exception:
                log.exception("cleaning expired files failed")
