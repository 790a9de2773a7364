"""The store's housekeeping threads: ConsumeQueue flushing (and the checkpoint's logics and
index timestamps) and expired-file cleaning (CommitLog, then ConsumeQueue and IndexFile)."""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.health import StoreHealth
from lakemq.store.index_service import IndexService
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import DELETE_FILES_BATCH_MAX
from lakemq.store.service_thread import ServiceThread

__all__ = [
    "CleanExpiredFilesService",
    "FlushConsumeQueueService",
    "ForcedDeletion",
    "RemovedRange",
    "UnconsumedJudge",
    "UnconsumedLoss",
]

log = logging.getLogger(__name__)

# RocketMQ's manual delete (TRIGGER_DELETE_FILES) runs this many clean rounds.
MANUAL_DELETE_ROUNDS = 20


# Forced deletions the console lists (the newest last).
FORCED_DELETIONS_KEPT = 20
# Topics a log line names at most (by most messages).
TOPICS_LOGGED = 20


@dataclass(frozen=True, slots=True)
class RemovedRange:
    """Messages of one queue whose records were in a deleted CommitLog file: queue offsets
    ``[begin, end)``."""

    topic: str
    queue_id: int
    begin: int
    end: int


@dataclass(frozen=True, slots=True)
class UnconsumedLoss:
    """Messages of one topic a deletion removed before every consumer group read them;
    ``groups`` are the groups that had not, none when no group has read the topic yet."""

    topic: str
    messages: int
    groups: tuple[str, ...]

    def describe(self) -> str:
        if not self.groups:
            return f"{self.topic} {self.messages} (no group has read it)"
        return f"{self.topic} {self.messages} (group{'s' if len(self.groups) > 1 else ''} {', '.join(self.groups)})"


# Which removed messages consumers had not read yet (the broker knows the committed offsets);
# with ``unread_topics`` the messages of a topic no group has read count too (a forced deletion).
UnconsumedJudge = Callable[[list[RemovedRange], bool], list[UnconsumedLoss]]


@dataclass(frozen=True, slots=True)
class ForcedDeletion:
    """A CommitLog file deleted before its ``fileReservedTime``."""

    file: str
    from_offset: int
    end_offset: int
    deleted_at_ms: int
    trigger: str  # "manual", or the disk usage that forced it
    messages: dict[str, int]  # by topic
    unconsumed: dict[str, int]  # by topic

    def summary(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.deleted_at_ms / 1000))
        lost = sum(self.unconsumed.values())
        return (f"{stamp} {self.file} [{self.from_offset}, {self.end_offset}) ({self.trigger}): "
                f"{sum(self.messages.values())} messages of {_by_count(self.messages)}; {lost} not consumed")


def _by_count(counts: dict[str, int]) -> str:
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    named = ", ".join(f"{topic} {n}" for topic, n in top[:TOPICS_LOGGED])
    more = len(top) - TOPICS_LOGGED
    return (named + (f" and {more} more topics" if more > 0 else "")) or "no topic"


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

    A file deleted before ``fileReservedTime`` (on a full disk, or by hand) is a forced
    deletion: logged at ERROR with the topics and message counts it removed, counted, and
    kept for the console. A deleted file that held messages some consumer group has not
    consumed yet (the unconsumed judge; after a forced deletion also every message of a topic
    no group has read) is logged at ERROR as DELETED UNCONSUMED MESSAGES and counted. Every
    100 ms the thread also measures the disk and the dispatch lag for :class:`StoreHealth`
    (disk full: puts refused)."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueueStore,
        index: IndexService | None,
        dispatched_offset: Callable[[], int],
        retention_guard: Callable[[], Callable[[], int] | None],
        health: StoreHealth,
        unconsumed_judge: Callable[[], UnconsumedJudge | None] = lambda: None,
    ) -> None:
        super().__init__("CleanExpiredFilesService")
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._index = index
        self._dispatched_offset = dispatched_offset
        self._retention_guard = retention_guard
        self._health = health
        self._unconsumed_judge = unconsumed_judge
        self._manual_rounds = 0
        # CommitLog files deleted, by why they went ("expired", "forced": before their
        # fileReservedTime, whatever forced it), and how many held unconsumed messages.
        self.deleted_files: Counter[str] = Counter()
        self.unconsumed_files_deleted = 0
        self.forced_messages_deleted: Counter[str] = Counter()  # by topic
        self.unconsumed_messages_deleted: Counter[str] = Counter()  # by topic
        self.forced_deletions: deque[ForcedDeletion] = deque(maxlen=FORCED_DELETIONS_KEPT)

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
        # When each would expire, read before deleting (a deleted file's descriptor is closed).
        expiry_ms = [mf.last_modified() * 1000 + expired_ms for mf in files]
        count = self._commit_log.delete_expired_file(expired_ms, self.max_deletable_offset(),
                                                      c.delete_commit_log_files_interval, clean_immediately=at_once)
        judge = self._unconsumed_judge()
        for mf, expires_ms in zip(files[:count], expiry_ms):
            was_expired = now_ms >= expires_ms
            self.deleted_files["expired" if was_expired else "forced"] += 1
            if was_expired and judge is None:
                continue
            # The ConsumeQueue entries of a deleted file are still there (they go after it).
            ranges = self._removed_ranges(mf.file_from_offset, mf.file_end_offset)
            losses = judge(ranges, not was_expired) if judge is not None else []
            if not was_expired:
                self._forced(mf, reason, ranges, losses, (expires_ms - now_ms) / 3_600_000)
            if losses:
                self.unconsumed_files_deleted += 1
                for loss in losses:
                    self.unconsumed_messages_deleted[loss.topic] += loss.messages
                log.error("DELETED UNCONSUMED MESSAGES: CommitLog file %s (offsets [%d, %d), %s, %s) held %d messages "
                          "not consumed yet: %s", mf.path.name, mf.file_from_offset, mf.file_end_offset,
                          "expired" if was_expired else "forced", reason, sum(loss.messages for loss in losses),
                          "; ".join(loss.describe() for loss in losses[:TOPICS_LOGGED]))
        return count

    def _removed_ranges(self, from_offset: int, end_offset: int) -> list[RemovedRange]:
        ranges = []
        for cq in self._queues.all():
            if cq.max_physic_offset <= from_offset:
                continue
            begin, end = cq.offset_at_phy(from_offset), cq.offset_at_phy(end_offset)
            if end > begin:
                ranges.append(RemovedRange(cq.topic, cq.queue_id, begin, end))
        return ranges

    def _forced(self, mf: MappedFile, reason: str, ranges: list[RemovedRange], losses: list[UnconsumedLoss],
                early_h: float) -> None:
        messages: Counter[str] = Counter()
        for r in ranges:
            messages[r.topic] += r.end - r.begin
        self.forced_messages_deleted.update(messages)
        deletion = ForcedDeletion(mf.path.name, mf.file_from_offset, mf.file_end_offset, int(time.time() * 1000), reason,
                                  dict(messages), {loss.topic: loss.messages for loss in losses})
        self.forced_deletions.append(deletion)
        log.error("FORCED DELETION: CommitLog file %s (offsets [%d, %d)) deleted %.1f h before its fileReservedTime "
                  "of %d h (%s); it held %d messages: %s", mf.path.name, mf.file_from_offset, mf.file_end_offset,
                  early_h, self._config.file_reserved_time, reason, sum(messages.values()), _by_count(messages))

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
