"""Walking a CommitLog byte range record by record.

Only the 4-byte sizes chain records together, so finding where records start is a
sequential walk; everything after that (decoding, checksums) works on the array of starts.
A bad record either stops the walk (the write frontier of the live file), raises with its
offset, or is skipped by resynchronising: the next record is the first position whose magic
code, lengths, CRC and PHYSICALOFFSET field (its own CommitLog offset, a strong anchor) all
check out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from lakemq.common.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, RECORD_FIXED_SIZE, check_record
from lakemq.errors import CorruptSegmentError

__all__ = ["Walk", "walk_records", "OnBad", "Buffer"]

OnBad = Literal["raise", "resync", "stop"]

_SIZE_MAGIC = struct.Struct(">iI")
_MAGIC = struct.pack(">I", MESSAGE_MAGIC_CODE)
_BLANK = struct.pack(">I", BLANK_MAGIC_CODE)


class Buffer(Protocol):
    """bytes or mmap: sliceable, ``find``-able, readable by struct."""

    def __len__(self) -> int: ...
    def __getitem__(self, item: slice | int, /) -> bytes | int: ...
    def find(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...


@dataclass(frozen=True, slots=True)
class Walk:
    starts: np.ndarray  # int64 positions in the buffer of the records found
    stop: int  # where walking ended: the range end, a blank record, or the first bad byte
    blank_at: int | None  # position of the blank (end-of-file) record, if reached
    corrupt: tuple[tuple[int, int], ...]  # skipped byte ranges [start, end), buffer positions


def _record_ok(buf: Buffer, pos: int, end: int, base_offset: int, verify: bool) -> int:
    """Size of a good record at ``pos``, 0 for a blank, -1 for bad."""
    if pos + 8 > end:
        return -1
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)  # type: ignore[call-overload]
    if magic == BLANK_MAGIC_CODE:
        return 0 if size >= 8 else -1
    if magic != MESSAGE_MAGIC_CODE or size < RECORD_FIXED_SIZE or pos + size > end:
        return -1
    if verify:
        size = check_record(buf, pos, check_crc=True, physical_offset=base_offset + pos)  # type: ignore[arg-type]
        return size if size > 0 else -1
    return size


def _resync(buf: Buffer, pos: int, end: int, base_offset: int) -> int:
    """The next position after ``pos`` where a verified record or a blank tail starts."""
    probe = pos + 1
    while probe < end:
        hits = [h for h in (buf.find(_MAGIC, probe + 4, end), buf.find(_BLANK, probe + 4, end)) if h >= 0]
        if not hits:
            return end
        cand = min(hits) - 4
        if buf.find(_BLANK, cand + 4, cand + 8) == cand + 4:
            size = _SIZE_MAGIC.unpack_from(buf, cand)[0]  # type: ignore[call-overload]
            if cand + size == end:
                return cand
        elif check_record(buf, cand, check_crc=True, physical_offset=base_offset + cand) > 0:  # type: ignore[arg-type]
            return cand
        probe = cand + 1
    return end


def walk_records(
    buf: Buffer, base_offset: int, start: int, end: int, *, verify: bool, on_bad: OnBad
) -> Walk:
    """Records in ``buf[start:end]``; ``base_offset`` is the CommitLog offset of ``buf[0]``.

    ``verify`` checks each record fully (lengths, body CRC, PHYSICALOFFSET); without it only
    magic code and size are checked here and the decoder validates the rest in bulk."""
    starts: list[int] = []
    corrupt: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        size = _record_ok(buf, pos, end, base_offset, verify)
        if size > 0:
            starts.append(pos)
            pos += size
            continue
        if size == 0:
            return Walk(np.asarray(starts, dtype=np.int64), pos, pos, tuple(corrupt))
        if on_bad == "stop":
            break
        if on_bad == "raise":
            raise CorruptSegmentError(f"corrupt CommitLog record at offset {base_offset + pos}", base_offset + pos)
        nxt = _resync(buf, pos, end, base_offset)
        corrupt.append((pos, nxt))
        pos = nxt
    return Walk(np.asarray(starts, dtype=np.int64), pos, None, tuple(corrupt))
