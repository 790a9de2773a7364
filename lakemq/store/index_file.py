"""IndexFile: a hash map with chained lists laid out in one fixed-size mmap file (RocketMQ 4.x).

File layout (``index/{yyyyMMddHHmmssSSS}``, defaults 5,000,000 slots and 20,000,000 entries,
420,000,040 bytes), big endian::

    0 +--------------------+--------------------+--------------------+--------------------+
      | begin timestamp 8  | end timestamp 8    | begin phy offset 8 | end phy offset 8   |
   32 +----------+---------+--------------------+--------------------+--------------------+
      | slots 4  | count 4 |   header: 40 bytes
   40 +----------+---------+----------+-----   ---+----------+
      | slot 0   | slot 1  | slot 2   |   ...    | slot S-1 |   4 bytes each: index of the
      +----------+---------+----------+-----   ---+----------+   newest entry hashed here
   40 + 4*S
      +----------------------------------------------------------------------+
      | entry 0 (never used: index 0 means "no entry")                       |
      +------------+------------------------+----------------+---------------+
      | key hash 4 | commit log offset 8    | time diff s 4  | prev index 4  |  entry 1
      +------------+------------------------+----------------+---------------+
      | ...                                                    entries 2 .. N-1
      +----------------------------------------------------------------------+

A key hashes to ``abs(String.hashCode(key)) % S``; the slot holds the newest entry for that
slot and each entry points to the previous one, so a lookup walks newest to oldest. The time
diff is whole seconds after the header's begin timestamp. The header's index count starts at 1
(entry 0 is the "invalid" marker), so a file holds N - 1 entries, as in RocketMQ.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final

from lakemq.common.durable import create_file_durably
from lakemq.errors import CorruptFileError, StoreError
from lakemq.store._index import IndexKeys, java_hash, put_index_keys
from lakemq.store.mapped_file import preallocate

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "IndexFile",
    "index_file_size",
    "index_key_hash",
]

HEADER_SIZE: Final = 40
SLOT_SIZE: Final = 4
ENTRY_SIZE: Final = 20
INVALID_INDEX: Final = 0

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_INT_MAX: Final = 0x7FFFFFFF


def index_key_hash(key: str) -> int:
    """RocketMQ's indexKeyHashMethod: ``Math.abs(key.hashCode())``, 0 for Integer.MIN_VALUE."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


class IndexFile:
    """One index file. Not thread-safe: :class:`IndexService` serializes writers and readers."""

    def __init__(
        self,
        path: Path,
        hash_slot_num: int,
        index_num: int,
        *,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> None:
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError(f"hash slot num {hash_slot_num} and index num {index_num} must be > 0 and > 1")
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        existed = path.exists()
        if existed and path.stat().st_size != self.file_size:
            raise CorruptFileError(
                f"index file {path} is {path.stat().st_size} bytes, expected {self.file_size} "
                f"({hash_slot_num} slots, {index_num} entries)"
            )
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not existed:
                os.ftruncate(fd, self.file_size)
                # Blocks now, or a write into the sparse mapping on a full disk is a SIGBUS.
                preallocate(fd, 0, self.file_size, required=True)
                os.fsync(fd)
                create_file_durably(path)  # or a power cut takes the file its flushes went to
            self._mm = mmap.mmap(fd, self.file_size)
        except OSError as exc:
            if not existed:
                path.unlink(missing_ok=True)
            raise StoreError(f"cannot create index file {path}: {exc}") from exc
        finally:
            os.close(fd)
        self.begin_timestamp: int
        self.end_timestamp: int
        self.begin_phy_offset: int
        self.end_phy_offset: int
        self.hash_slot_count: int
        self.index_count: int
        if existed:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
             self.hash_slot_count, self.index_count) = _HEADER.unpack_from(self._mm, 0)
            if self.index_count <= 0:
                self.index_count = 1
            if self.index_count > index_num:
                self.close()
                raise CorruptFileError(f"index file {path}: header count {self.index_count} > {index_num} entries")
        else:
            # A new file continues where the previous one ended, so time and offset ranges tile.
            self.begin_timestamp = self.end_timestamp = max(end_timestamp, 0)
            self.begin_phy_offset = self.end_phy_offset = max(end_phy_offset, 0)
            self.hash_slot_count = 0
            self.index_count = 1
            self._write_header()

    @property
    def file_name(self) -> str:
        return self.path.name

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        )

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def entry_count(self) -> int:
        return self.index_count - 1

    def _slot_pos(self, key_hash: int) -> int:
        return HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE

    def _entry_pos(self, index: int) -> int:
        return HEADER_SIZE + self.hash_slot_num * SLOT_SIZE + index * ENTRY_SIZE

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset``; False when the file is full."""
        return self.put_keys(IndexKeys.of([key], [phy_offset], [store_timestamp])) == 1

    def put_keys(self, keys: IndexKeys, start: int = 0) -> int:
        """Add ``keys[start:]`` (in CommitLog order; the entries are written in C) as far as
        they fit, with the header written once; returns how many fit (the rest belong in the
        next file)."""
        count, new_slots, begin_timestamp, begin_phy_offset = put_index_keys(
            self._mm, self.hash_slot_num, self.index_num, self.index_count, self.begin_timestamp, keys, start)
        if count <= 0:
            return 0
        if begin_phy_offset is not None:  # the file's first entry
            self.begin_phy_offset = begin_phy_offset
            self.begin_timestamp = begin_timestamp
        self.hash_slot_count += new_slots
        self.index_count += count
        self.end_phy_offset = keys.phy(start + count - 1)
        self.end_timestamp = keys.timestamp(start + count - 1)
        self._write_header()
        return count

    def undo_entries_from(self, phy_offset: int) -> int:
        """Remove the newest entries while they point at or past ``phy_offset``; each removed
        entry hands its slot back to the entry it chained to. Returns how many went."""
        removed = 0
        while self.index_count > 1:
            index = self.index_count - 1
            key_hash, phy, _diff, prev = _ENTRY.unpack_from(self._mm, self._entry_pos(index))
            if phy < phy_offset:
                break
            _SLOT.pack_into(self._mm, self._slot_pos(key_hash), prev if 0 < prev < index else INVALID_INDEX)
            if prev == INVALID_INDEX:
                self.hash_slot_count = max(0, self.hash_slot_count - 1)
            _ENTRY.pack_into(self._mm, self._entry_pos(index), 0, 0, 0, 0)
            self.index_count = index
            removed += 1
        if removed:
            if self.index_count > 1:
                _h, phy, diff, _p = _ENTRY.unpack_from(self._mm, self._entry_pos(self.index_count - 1))
                self.end_phy_offset = phy
                self.end_timestamp = self.begin_timestamp + diff * 1000
            else:
                self.end_phy_offset = self.begin_phy_offset
                self.end_timestamp = self.begin_timestamp
            self._write_header()
        return removed

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] overlaps the file's [begin timestamp, end timestamp]."""
        return (
            (begin < self.begin_timestamp and end > self.end_timestamp)
            or self.begin_timestamp <= begin <= self.end_timestamp
            or self.begin_timestamp <= end <= self.end_timestamp
        )

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """CommitLog offsets of entries for ``key`` stored within [begin, end] ms, newest first."""
        found: list[int] = []
        if max_num <= 0 or self.index_count <= 1:
            return found
        key_hash = index_key_hash(key)
        (index,) = _SLOT.unpack_from(self._mm, self._slot_pos(key_hash))
        # Each step moves to a strictly older entry, which bounds the walk even on a bad file.
        while INVALID_INDEX < index < self.index_count and len(found) < max_num:
            hash_read, phy_read, diff, prev = _ENTRY.unpack_from(self._mm, self._entry_pos(index))
            if diff < 0:
                break
            time_read = self.begin_timestamp + diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                found.append(phy_read)
            if time_read < begin or prev >= index:
                break
            index = prev
        return found

    def flush(self) -> None:
        self._write_header()
        self._mm.flush()

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
