"""IndexService: the IndexFiles under ``index/``, built from dispatch, queried by key.

Each message is indexed under ``topic#UNIQ_KEY`` and ``topic#KEY`` for every space-separated
key in KEYS. Files are named by their creation time (``yyyyMMddHHmmssSSS``; after a clock
step back, the number after the last name, so names keep creation order) and filled in
CommitLog order; when one is full the next continues where it ended.

Recovery: after an abnormal exit a file whose end timestamp is past the checkpoint's index
timestamp may hold pages that never reached the disk; it is deleted and :meth:`load` returns
its begin timestamp, from where the CommitLog replay rebuilds it; so is a newest file a power
cut left shorter than its size (cut while it was being made). After any recovery,
:meth:`truncate_dirty` undoes entries for CommitLog bytes that recovery cut off.

:meth:`whole_from` says from which CommitLog offset the index holds every keyed record: only
records this process dispatched count (a previous run may have had the index off, or dropped
keys it could not write), and after keys were dropped, only the records since.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lakemq.common.durable import make_dirs_durably, unlink_durably
from lakemq.common.message import MessageSysFlag
from lakemq.errors import StoreError
from lakemq.store._index import IndexKeys, index_keys
from lakemq.store.commit_log_scan import DispatchBatch, DispatchRequest
from lakemq.store.index_file import IndexFile, index_file_size

__all__ = ["IndexService", "QueryOffsetResult", "build_key"]

log = logging.getLogger(__name__)


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def _file_name(store_ms: int) -> str:
    """An IndexFile's name: the store time of its first record, local time to the ms (RocketMQ's
    shape, which names by the wall clock). Derived from the data, so a rebuild from the
    CommitLog (lakemq.jobs.reindex) names every file as the broker did."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(store_ms / 1000)) + f"{store_ms % 1000:03d}"


@dataclass(frozen=True, slots=True)
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0
    whole_from: int | None = None  # whole_from() as the files were read


class IndexService:
    def __init__(self, index_dir: Path, *, hash_slot_num: int, index_num: int) -> None:
        self.index_dir = Path(index_dir)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.index_files: list[IndexFile] = []
        self._file_size = index_file_size(hash_slot_num, index_num)
        # End timestamp of the newest file known to be on disk whole (the checkpoint's value).
        self.flushed_timestamp = 0
        # CommitLog offset of the first record whose keys were dropped: no new file could be made.
        self._unindexed_from: int | None = None
        # CommitLog offset from which this process indexed every keyed record (whole_from).
        self._whole_from: int | None = None
        self._lock = threading.RLock()

    # -- load and recovery -------------------------------------------------------------------

    def load(self, last_exit_ok: bool, checkpoint_index_timestamp: int) -> int | None:
        """Open the files. After an abnormal exit, delete those that may be torn and return the
        earliest begin timestamp among them (the CommitLog replay must start at or before it);
        None when nothing was deleted."""
        rebuild_from: int | None = None
        self.index_dir.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.index_dir.iterdir() if p.is_file() and p.name.isdigit())
        for path in paths:
            if not last_exit_ok and path == paths[-1] and path.stat().st_size < self._file_size:
                # A power cut while the file was being made: its size is set and synced before
                # any entry goes in, so it held none. What it would have held is rebuilt from
                # where the file before it ends.
                log.warning("index file %s is %d bytes, not %d (its creation was cut short): removed",
                            path.name, path.stat().st_size, self._file_size)
                unlink_durably(path)
                end = self.index_files[-1].end_timestamp if self.index_files else 0
                rebuild_from = end if rebuild_from is None else min(rebuild_from, end)
                continue
            f = IndexFile(path, self.hash_slot_num, self.index_num)
            if not last_exit_ok and f.end_timestamp > checkpoint_index_timestamp:
                log.warning("index file %s ends after the checkpoint (%d > %d): rebuilt from the CommitLog",
                            path.name, f.end_timestamp, checkpoint_index_timestamp)
                begin = f.begin_timestamp
                rebuild_from = begin if rebuild_from is None else min(rebuild_from, begin)
                f.destroy()
                continue
            self.index_files.append(f)
        self.flushed_timestamp = checkpoint_index_timestamp
        return rebuild_from

    def truncate_dirty(self, phy_offset: int) -> None:
        """Remove entries for records at or past ``phy_offset``, newest first, so each slot
        gets back the entry it pointed to before."""
        with self._lock:
            for f in reversed(self.index_files):
                if f.entry_count() == 0:
                    continue
                whole = f.begin_phy_offset >= phy_offset
                f.undo_entries_from(phy_offset)
                if not whole:
                    break
            files = self.index_files
            emptied = [f for f in files[:-1] if f.entry_count() == 0]
            self.index_files = [f for f in files if f not in emptied]
        for f in emptied:
            f.destroy()

    # -- building ----------------------------------------------------------------------------

    def _last_indexed_offset(self) -> int:
        """CommitLog offset of the newest indexed message, -1 when none."""
        for f in reversed(self.index_files):
            if f.entry_count() > 0:
                return f.end_phy_offset
        return -1

    def dispatch(self, request: DispatchRequest) -> None:
        """The IndexFile builder (a CommitLogDispatcher)."""
        if MessageSysFlag.transaction_value(request.sys_flag) == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return
        keys = [request.uniq_key] if request.uniq_key else []
        keys.extend(k for k in request.keys.split(" ") if k)
        if not keys:
            return
        with self._lock:
            # A replay after recovery passes records already indexed.
            if request.commit_log_offset <= self._last_indexed_offset():
                return
            self._put_keys(IndexKeys.of([build_key(request.topic, key) for key in keys],
                                        [request.commit_log_offset] * len(keys),
                                        [request.store_timestamp] * len(keys)))

    def dispatch_batch(self, batch: DispatchBatch) -> None:
        """dispatch for consecutive records: their keys (hashed in C while the records were
        read) written per file with one header update."""
        with self._lock:
            keys = index_keys(batch, self._last_indexed_offset())  # a replay passes indexed records
            if len(keys):
                self._put_keys(keys)

    def _put_keys(self, keys: IndexKeys) -> None:
        done = 0
        while done < len(keys):
            try:
                f = self._writable_file(keys.timestamp(done))
            except StoreError as exc:
                # As RocketMQ: the keys go unindexed rather than hold the ConsumeQueues back.
                if self._unindexed_from is None:
                    log.error("indexing stopped at CommitLog offset %d: %s", keys.phy(done), exc)
                    self._unindexed_from = keys.phy(done)
                return
            done += f.put_keys(keys, done)
        if self._unindexed_from is not None:
            log.warning("indexing resumed at CommitLog offset %d; records in [%d, %d) are not indexed",
                        keys.phy(0), self._unindexed_from, keys.phy(0))
            self._unindexed_from = None
            self._whole_from = keys.phy(0)

    def _writable_file(self, first_store_ms: int) -> IndexFile:
        """The file to add keys to; a new one is named after ``first_store_ms``, the store
        time of its first key's record."""
        last = self.index_files[-1] if self.index_files else None
        if last is not None and not last.is_write_full():
            return last
        end_phy = last.end_phy_offset if last else 0
        end_ts = last.end_timestamp if last else 0
        name = _file_name(first_store_ms)
        if last is not None:
            # Load sorts files by name: a name that would not sort after the last file's (a
            # file filled within one millisecond, a clock step back) counts on from it.
            name = max(name, last.file_name)
        while (self.index_dir / name).exists() or (last is not None and name == last.file_name):
            name = f"{int(name) + 1:0{len(name)}d}"
        path = self.index_dir / name
        make_dirs_durably(self.index_dir)
        f = IndexFile(path, self.hash_slot_num, self.index_num, end_phy_offset=end_phy, end_timestamp=end_ts)
        self.index_files = [*self.index_files, f]
        if last is not None:
            # The full file is final: once on disk, recovery never needs to rebuild it.
            last.flush()
            self.flushed_timestamp = max(self.flushed_timestamp, last.end_timestamp)
        return f

    def dispatching_from(self, phy_offset: int) -> None:
        """Dispatch (reput) goes on from ``phy_offset``: every keyed record from there on is
        indexed, as long as no keys are dropped."""
        with self._lock:
            self._whole_from = phy_offset

    def whole_from(self) -> int | None:
        """CommitLog offset from which every keyed record dispatched so far is in the index;
        None while keys are being dropped or before dispatch began."""
        with self._lock:
            return self._whole_from_locked()

    def _whole_from_locked(self) -> int | None:
        return None if self._unindexed_from is not None else self._whole_from

    # -- querying ----------------------------------------------------------------------------

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """CommitLog offsets of messages indexed under ``topic#key`` stored in [begin, end]
        (ms), newest file first, at most ``max_num``. Every file is asked (not only down to the
        first that begins before ``begin``): after a clock step back, older files begin later."""
        offsets: list[int] = []
        with self._lock:
            files = self.index_files
            last = files[-1] if files else None
            for f in reversed(files):
                if len(offsets) >= max_num:
                    break
                if f.is_time_matched(begin, end):
                    offsets.extend(f.select_phy_offsets(build_key(topic, key), max_num - len(offsets), begin, end))
            return QueryOffsetResult(
                offsets,
                last.end_timestamp if last else 0,
                last.end_phy_offset if last else 0,
                self._whole_from_locked(),
            )

    # -- expiry and lifecycle ----------------------------------------------------------------

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete files (never the newest) whose every entry points below ``min_phy_offset``."""
        with self._lock:
            doomed = [f for f in self.index_files[:-1] if f.end_phy_offset < min_phy_offset]
            if not doomed:
                return 0
            self.index_files = [f for f in self.index_files if f not in doomed]
        for f in doomed:
            f.destroy()
            log.info("deleted expired index file %s", f.file_name)
        return len(doomed)

    def flush(self) -> int:
        """Flush every file; returns the newest end timestamp now on disk."""
        with self._lock:
            files = list(self.index_files)
            stamp = files[-1].end_timestamp if files else 0
        for f in files:
            f.flush()
        return stamp

    def shutdown(self) -> None:
        with self._lock:
            for f in self.index_files:
                f.flush()
                f.close()

    def destroy(self) -> None:
        with self._lock:
            for f in self.index_files:
                f.destroy()
            self.index_files = []
