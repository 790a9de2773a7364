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
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from lakemq.common.message import tags_hash_code
from lakemq.errors import CorruptFileError, StoreError
from lakemq.store.mapped_file import preallocate

__all__ = [
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "IndexFile",
    "index_file_size",
    "index_key_hash",
    "index_key_hashes",
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
    h = tags_hash_code(key)
    return 0 if h == -0x80000000 else abs(h)


# Below this many keys the per-call cost of numpy outweighs the per-character loop.
_VECTOR_MIN_KEYS: Final = 16
_powers_of_31 = np.ones(1, dtype=np.uint64)  # 31**i mod 2**32, grown on demand


def _powers(n: int) -> np.ndarray:
    global _powers_of_31
    if len(_powers_of_31) < n:
        size = max(n, 2 * len(_powers_of_31))
        powers, value = [], 1
        for _ in range(size):
            powers.append(value)
            value = value * 31 & 0xFFFFFFFF
        _powers_of_31 = np.array(powers, dtype=np.uint64)
    return _powers_of_31


def index_key_hashes(keys: Sequence[str]) -> list[int]:
    """index_key_hash of every key, vectorized: Java's hashCode is the sum of each UTF-16
    code unit times 31**(units after it), mod 2**32; every key's terms are summed at once."""
    if len(keys) < _VECTOR_MIN_KEYS:
        return [index_key_hash(k) for k in keys]
    joined = "".join(keys)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    else:
        encoded = [k.encode("utf-16-be") for k in keys]  # a code point past U+FFFF is two units
        units = np.frombuffer(b"".join(encoded), dtype=">u2")
        lengths = np.fromiter((len(e) // 2 for e in encoded), dtype=np.int64, count=len(keys))
    if len(units) == 0:
        return [0] * len(keys)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    exponents = np.repeat(ends - 1, lengths) - np.arange(len(units))
    # each term < 2**16 * 2**32; the uint64 sums wrap mod 2**64, which keeps them right mod 2**32
    terms = units.astype(np.uint64) * _powers(int(lengths.max()))[exponents]
    sums = np.add.reduceat(terms, np.minimum(starts, len(units) - 1)) & np.uint64(0xFFFFFFFF)
    sums[lengths == 0] = 0
    signed = sums.astype(np.int64)
    signed[signed >= 0x80000000] -= 0x100000000
    # Math.abs, with Integer.MIN_VALUE mapped to 0 as in index_key_hash
    hashes: list[int] = np.where(signed == -0x80000000, 0, np.abs(signed)).tolist()
    return hashes


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
            self._mm = mmap.mmap(fd, self.file_size)
        except OSError as exc:
            if not existed:
                path.unlink(missing_ok=True)
            raise StoreError(f"cannot create index file {path}: {exc}") from exc
        finally:
            os.close(fd)
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
        if self.is_write_full():
            return False
        key_hash = index_key_hash(key)
        slot_pos = self._slot_pos(key_hash)
        (slot_value,) = _SLOT.unpack_from(self._mm, slot_pos)
        if slot_value <= INVALID_INDEX or slot_value >= self.index_count:
            slot_value = INVALID_INDEX
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), _INT_MAX)
        index = self.index_count
        _ENTRY.pack_into(self._mm, self._entry_pos(index), key_hash, phy_offset, time_diff, slot_value)
        _SLOT.pack_into(self._mm, slot_pos, index)
        if index <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = index + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def put_keys(self, key_hashes: Sequence[int], phy_offsets: Sequence[int], store_timestamps: Sequence[int]) -> int:
        """put_key for many keys already hashed (index_key_hashes), in CommitLog order, with
        the header written once; returns how many fit (the rest belong in the next file)."""
        mm = self._mm
        index = self.index_count
        count = min(len(key_hashes), self.index_num - index)
        if count <= 0:
            return 0
        slots = self.hash_slot_num
        unpack_slot, pack_slot, pack_entry = _SLOT.unpack_from, _SLOT.pack_into, _ENTRY.pack_into
        entries_pos = HEADER_SIZE + slots * SLOT_SIZE
        begin = self.begin_timestamp
        new_slots = 0
        for key_hash, phy_offset, store_timestamp in zip(key_hashes[:count], phy_offsets, store_timestamps):
            slot_pos = HEADER_SIZE + (key_hash % slots) * SLOT_SIZE
            (slot_value,) = unpack_slot(mm, slot_pos)
            if slot_value <= INVALID_INDEX or slot_value >= index:
                slot_value = INVALID_INDEX
                new_slots += 1
            time_diff = 0 if begin <= 0 else min(max((store_timestamp - begin) // 1000, 0), _INT_MAX)
            pack_entry(mm, entries_pos + index * ENTRY_SIZE, key_hash, phy_offset, time_diff, slot_value)
            pack_slot(mm, slot_pos, index)
            if index <= 1:  # as put_key: the first entry's diff is taken before the file's begin is set
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = begin = store_timestamp
            index += 1
        self.hash_slot_count += new_slots
        self.index_count = index
        self.end_phy_offset = phy_offsets[count - 1]
        self.end_timestamp = store_timestamps[count - 1]
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
