"""MappedFileQueue: a directory of equal-size MappedFiles forming one logical byte stream.

File ``N`` starts at logical offset ``int(name)``; files are contiguous. The list of files is
replaced, never mutated, so readers on other threads iterate a consistent snapshot.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lakemq.errors import CorruptFileError
from lakemq.store.mapped_file import MappedFile, offset_to_file_name

__all__ = ["DELETE_FILES_BATCH_MAX", "MappedFileQueue"]

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10
_LONG = struct.Struct(">q")


class MappedFileQueue:
    def __init__(self, store_dir: Path, mapped_file_size: int, *, small_pages_while_appending: bool = False) -> None:
        """``small_pages_while_appending``: the file appends go to keeps page-size folios
        (MappedFile.set_appending), for a queue whose every append is flushed on its own
        (SYNC_FLUSH). Others keep the kernel's large folios: fewer page faults per append."""
        self.store_dir = Path(store_dir)
        self.mapped_file_size = mapped_file_size
        self._small_pages = small_pages_while_appending
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.store_timestamp = 0  # store time of a record known to be flushed (the checkpoint's)
        # Told of every file get_last_mapped_file creates, before anything is appended to it
        # (the SYNC_FLUSH commit thread flushes it by its descriptor).
        self.on_file_created: Callable[[MappedFile], None] | None = None
        self._lock = threading.Lock()

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> bool:
        """Map the existing files. File names must be spaced by the configured file size (if
        not, the configured size changed: CorruptFileError, nothing touched). A file of the
        wrong size (a crash while creating it, a damaged disk) is repaired when that loses
        nothing: a short one is extended with zeros, a long one is cut only if the excess is
        all zeros; otherwise CorruptFileError rather than cut data."""
        if not self.store_dir.is_dir():
            return True
        paths = sorted(p for p in self.store_dir.iterdir() if p.is_file() and _is_offset_name(p.name))
        starts = [int(p.name) for p in paths]
        size = self.mapped_file_size
        if any(start % size for start in starts) or any(b - a != size for a, b in itertools.pairwise(starts)):
            raise CorruptFileError(
                f"files in {self.store_dir} are not spaced by the configured file size {size} "
                f"(or a file is missing); check the mapped file size in the config"
            )
        files: list[MappedFile] = []
        for path in paths:
            actual = path.stat().st_size
            if actual != size:
                self._repair_size(path, actual)
            mf = MappedFile(path, size)
            mf.wrote_position = mf.flushed_position = size
            files.append(mf)
        self.mapped_files = files
        return True

    def _repair_size(self, path: Path, actual: int) -> None:
        if actual > self.mapped_file_size and not _is_zero(path, self.mapped_file_size, actual):
            raise CorruptFileError(
                f"{path} is {actual} bytes with data past the configured {self.mapped_file_size}; "
                "check the mapped file size in the config"
            )
        log.warning("%s is %d bytes, not %d: resized (no data lost)", path, actual, self.mapped_file_size)
        os.truncate(path, self.mapped_file_size)

    # -- lookup ------------------------------------------------------------------------------

    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The file to append to; with ``need_create`` a new one when there is none or the last
        is full (the first one at ``start_offset`` rounded down to a file boundary). With small
        pages the file returned is in appending mode (MappedFile.set_appending); the one it
        replaces no longer is."""
        files = self.mapped_files
        last = files[-1] if files else None
        if not need_create or (last is not None and not last.is_full()):
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
            last.set_appending(False)
        mf = MappedFile(self.store_dir / offset_to_file_name(create_offset), self.mapped_file_size)
        mf.set_appending(self._small_pages)
        if self.on_file_created is not None:
            try:
                self.on_file_created(mf)
            except BaseException:
                mf.close()  # not in the queue: appends must not land where nobody flushes
                raise
        with self._lock:
            self.mapped_files = [*self.mapped_files, mf]
        return mf

    def prepare_appends(self) -> None:
        """Appends are about to start (recovery is done): with small pages, the recovered
        last file goes into appending mode unless it is full."""
        files = self.mapped_files
        if self._small_pages and files and not files[-1].is_full():
            files[-1].set_appending(True)

    def find_mapped_file_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        index = (offset - first.file_from_offset) // self.mapped_file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_end_offset:
                return mf
        for mf in files:  # after a deletion race the index may be stale; scan
            if mf.file_from_offset <= offset < mf.file_end_offset:
                return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        """Start of the first file; 0 for an empty queue."""
        files = self.mapped_files
        return files[0].file_from_offset if files else 0

    def get_max_offset(self) -> int:
        files = self.mapped_files
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    def get_max_wrote_position(self) -> int:
        files = self.mapped_files
        return files[-1].wrote_position if files else 0

    def remain_how_many_data_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    # -- flushing ----------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> bool:
        """Flush from ``flushed_where`` on, across file boundaries; True when every written
        byte is on disk afterwards."""
        while True:
            mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
            if mf is None:
                break
            store_timestamp = mf.store_timestamp  # read first: it may only be older than what is flushed
            pos = mf.flush(least_pages)
            where = mf.file_from_offset + pos
            if where <= self.flushed_where:
                break
            self.flushed_where = where
            if store_timestamp:
                self.store_timestamp = store_timestamp
            if pos < mf.file_size:
                break
        return self.flushed_where >= self.get_max_offset()

    # -- truncation and deletion -------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Make ``offset`` the end of the queue: files wholly after it are deleted, the one
        holding it is cut there (and zeroed beyond)."""
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            if mf.file_from_offset + mf.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                mf.discard_after(offset - mf.file_from_offset)
                keep.append(mf)
            else:
                mf.destroy()
        with self._lock:
            self.mapped_files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def set_positions(self, offset: int) -> None:
        """After recovery: every file before ``offset`` is complete, the one holding it ends
        there."""
        for mf in self.mapped_files:
            if mf.file_from_offset + mf.file_size <= offset:
                mf.wrote_position = mf.flushed_position = mf.file_size
            elif mf.file_from_offset <= offset:
                mf.wrote_position = mf.flushed_position = offset - mf.file_from_offset
        self.flushed_where = offset

    def set_aside(self, files: list[MappedFile], directory: Path) -> None:
        """Take ``files`` out of the queue and move them into ``directory``: kept for an
        operator to inspect, never deleted."""
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.mapped_files = [f for f in self.mapped_files if all(f is not g for g in files)]
        for mf in files:
            mf.close()
            os.replace(mf.path, directory / mf.path.name)

    def delete_last_mapped_file(self) -> None:
        files = self.mapped_files
        if files:
            with self._lock:
                self.mapped_files = files[:-1]
            files[-1].destroy()

    def delete_expired_file_by_time(
        self,
        expired_ms: int,
        max_offset_allowed: int,
        delete_files_interval_ms: int = 0,
        clean_immediately: bool = False,
        now_ms: int | None = None,
    ) -> int:
        """Delete files not modified for ``expired_ms`` (all, with ``clean_immediately``),
        oldest first, never the last file and never a file ending after ``max_offset_allowed``
        (not yet dispatched, or not yet tiered). Returns how many went."""
        now = time.time() * 1000 if now_ms is None else now_ms
        doomed: list[MappedFile] = []
        for mf in self.mapped_files[:-1]:
            if mf.file_end_offset > max_offset_allowed:
                break
            if not clean_immediately and now < mf.last_modified() * 1000 + expired_ms:
                break
            doomed.append(mf)
            if len(doomed) >= DELETE_FILES_BATCH_MAX:
                break
        for i, mf in enumerate(doomed):
            if i and delete_files_interval_ms > 0:
                time.sleep(delete_files_interval_ms / 1000)
            self._remove_first(mf)
        return len(doomed)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """For fixed-unit queues whose units start with a CommitLog offset (ConsumeQueue):
        delete full files whose last unit points below ``offset``. Never the last file."""
        doomed: list[MappedFile] = []
        for mf in self.mapped_files[:-1]:
            last_unit = mf.read(mf.file_size - unit_size, 8)
            if len(last_unit) < 8 or _LONG.unpack(last_unit)[0] >= offset:
                break
            doomed.append(mf)
        for mf in doomed:
            self._remove_first(mf)
        return len(doomed)

    def _remove_first(self, mf: MappedFile) -> None:
        with self._lock:
            self.mapped_files = [f for f in self.mapped_files if f is not mf]
        mf.destroy()
        log.info("deleted file %s", mf.path)  # why (expired or forced) is the caller's to say

    def shutdown(self) -> None:
        for mf in self.mapped_files:
            mf.close()

    def destroy(self) -> None:
        files = self.mapped_files
        with self._lock:
            self.mapped_files = []
        for mf in files:
            mf.destroy()
        self.flushed_where = 0
        if self.store_dir.is_dir() and not any(self.store_dir.iterdir()):
            self.store_dir.rmdir()


def _is_offset_name(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


def _is_zero(path: Path, start: int, end: int) -> bool:
    with open(path, "rb") as f:
        f.seek(start)
        while start < end:
            chunk = f.read(min(1 << 20, end - start))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            start += len(chunk)
    return True
