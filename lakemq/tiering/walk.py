"""Finding where the records of a CommitLog byte range start.

Only the 4-byte sizes chain records together, so the exact method is a sequential walk.
A clean range is found without it, with numpy: every position holding the magic code and,
at PHYSICALOFFSET, its own CommitLog offset (a strong anchor) is a candidate, and when the
candidates chain up exactly (each record ends where the next begins, from the range start to
its end or a blank record) they are the records; anything else (damage, the live file's
frontier) falls back to the walk, so both give the same answer. :func:`record_layout`
checks every record's lengths (and CRC) at once over the array of starts.

In the walk a bad record either stops it (the write frontier of the live file), raises with
its offset, or is skipped by resynchronising: the next record is the first position whose
magic code, lengths, CRC and PHYSICALOFFSET field all check out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from mmap import mmap
from typing import Literal, TypeAlias

import numpy as np
from isal.isal_zlib import crc32

from lakemq.common.record import (
    BLANK_MAGIC_CODE,
    BODY_POS,
    MESSAGE_MAGIC_CODE,
    PHYSICAL_OFFSET_POS,
    RECORD_FIXED_SIZE,
    check_record,
)
from lakemq.errors import CorruptSegmentError

__all__ = ["HEADER_DTYPE", "Buffer", "Layout", "OnBad", "Walk", "chained_records", "gather", "record_layout",
           "walk_records"]

# The fixed header before the body, big-endian, as a numpy record.
HEADER_DTYPE = np.dtype({
    "names": ["total", "magic", "crc", "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag",
              "born_ts", "born_host", "store_ts", "store_host", "reconsume", "prepared", "body_len"],
    "formats": [">i4", ">u4", ">i4", ">i4", ">i4", ">i8", ">i8", ">i4", ">i8", ">u8", ">i8", ">u8", ">i4",
                ">i8", ">i4"],
    "offsets": [0, 4, 8, 12, 16, 20, 28, 36, 40, 48, 56, 64, 72, 76, 84],
    "itemsize": BODY_POS,
})
_SCAN_BLOCK = 16 << 20
_MAGIC_BYTES = np.frombuffer(struct.pack(">I", MESSAGE_MAGIC_CODE), dtype=np.uint8)

OnBad = Literal["raise", "resync", "stop"]

_SIZE_MAGIC = struct.Struct(">iI")
_MAGIC = struct.pack(">I", MESSAGE_MAGIC_CODE)
_BLANK = struct.pack(">I", BLANK_MAGIC_CODE)
_FIND_WINDOW = 1 << 20  # bytes copied per step of a resynchronising search


# What the walk reads: a CommitLog file's bytes or its read-only mapping.
Buffer: TypeAlias = bytes | mmap


@dataclass(frozen=True, slots=True)
class Walk:
    starts: np.ndarray  # int64 positions in the buffer of the records found
    stop: int  # where walking ended: the range end, a blank record, or the first bad byte
    blank_at: int | None  # position of the blank (end-of-file) record, if reached
    corrupt: tuple[tuple[int, int], ...]  # skipped byte ranges [start, end), buffer positions


def gather(raw: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """``raw[p : p + width]`` for every p, as a (len(positions), width) matrix: row picks from a
    sliding-window view, so each row is one contiguous copy."""
    if len(raw) < width:
        return np.empty((0, width), dtype=np.uint8)
    picked: np.ndarray = np.lib.stride_tricks.sliding_window_view(raw, width)[positions]
    return picked


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each record's parts are, and whether its lengths (and CRC) hold up."""

    ok: np.ndarray  # bool per record
    header: np.ndarray  # HEADER_DTYPE per record
    body_len: np.ndarray  # int64 per record, as are the positions below (buffer positions)
    topic_len_pos: np.ndarray
    topic_len: np.ndarray
    props_len_pos: np.ndarray
    props_len: np.ndarray


def record_layout(raw: np.ndarray, starts: np.ndarray, base_offset: int, *, check_crc: bool,
                  own_offsets: bool = True) -> Layout:
    """The checks of :func:`lakemq.common.record.check_record` for every start at once; positions of
    bad records are clamped to 0 so the arrays stay indexable. Without ``own_offsets`` a record's
    PHYSICALOFFSET need not be its place in ``raw`` (records a broker gathered for a pull)."""
    hdr = gather(raw, starts, BODY_POS).view(HEADER_DTYPE).reshape(-1)
    total = hdr["total"].astype(np.int64)
    body_len = hdr["body_len"].astype(np.int64)
    record_end = starts + total
    ok = (hdr["magic"] == MESSAGE_MAGIC_CODE) & (total >= RECORD_FIXED_SIZE) & (record_end <= len(raw))
    ok &= (body_len >= 0) & (starts + BODY_POS + body_len + 3 <= record_end)
    topic_len_pos = np.where(ok, starts + BODY_POS + body_len, 0)
    topic_len = raw[topic_len_pos].astype(np.int64)
    props_len_pos = np.where(ok, topic_len_pos + 1 + topic_len, 0)
    ok &= props_len_pos + 2 <= record_end
    props_len_pos = np.where(ok, props_len_pos, 0)
    props_len = (raw[props_len_pos].astype(np.int64) << 8) | raw[props_len_pos + 1]
    ok &= (props_len < 0x8000) & (total == RECORD_FIXED_SIZE + body_len + topic_len + props_len)
    if own_offsets:
        ok &= hdr["physical_offset"] == starts + base_offset
    if check_crc:
        view = memoryview(raw)  # type: ignore[arg-type]
        body = np.minimum(starts + BODY_POS, len(raw))
        slices = map(slice, body.tolist(), np.clip(body + body_len, body, len(raw)).tolist())
        crcs = np.fromiter(map(crc32, map(view.__getitem__, slices)), dtype=np.int64, count=len(starts))
        ok &= (crcs & 0x7FFFFFFF) == hdr["crc"]
    return Layout(ok, hdr, body_len, topic_len_pos, topic_len, props_len_pos, props_len)


def _chain(buf: Buffer, base_offset: int, start: int, end: int, verify: bool) -> Walk | None:
    """The records of a clean range found with numpy (see the module docstring), or None."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    if end - start < RECORD_FIXED_SIZE:
        return None
    found = []
    for lo in range(start, end - RECORD_FIXED_SIZE + 1, _SCAN_BLOCK):  # blocks bound the temporaries
        hi = min(lo + _SCAN_BLOCK, end - RECORD_FIXED_SIZE + 1)
        hits = np.flatnonzero(raw[lo + 4 : hi + 4] == _MAGIC_BYTES[0]) + lo
        for k in (1, 2, 3):
            hits = hits[raw[hits + 4 + k] == _MAGIC_BYTES[k]]
        found.append(hits)
    hits = np.concatenate(found)
    if not len(hits) or hits[0] != start:
        return None
    hits = hits[gather(raw, hits + PHYSICAL_OFFSET_POS, 8).view(">i8").reshape(-1) == hits + base_offset]
    sizes = gather(raw, hits, 4).view(">i4").reshape(-1).astype(np.int64)
    if not len(hits) or hits[0] != start or (sizes < RECORD_FIXED_SIZE).any():
        return None
    if (hits[1:] != hits[:-1] + sizes[:-1]).any():
        return None
    tail = int(hits[-1] + sizes[-1])
    blank_at: int | None = None
    if tail != end:
        if tail + 8 > end:
            return None
        size, magic = int(raw[tail : tail + 4].view(">i4")[0]), int(raw[tail + 4 : tail + 8].view(">u4")[0])
        if magic != BLANK_MAGIC_CODE or size < 8:
            return None
        blank_at = tail
    if verify and not record_layout(raw[:end], hits, base_offset, check_crc=True).ok.all():
        return None
    return Walk(hits.astype(np.int64), tail, blank_at, ())


def _record_ok(buf: Buffer, pos: int, end: int, base_offset: int, verify: bool) -> int:
    """Size of a good record at ``pos``, 0 for a blank, -1 for bad."""
    if pos + 8 > end:
        return -1
    size: int
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return 0 if size >= 8 else -1
    if magic != MESSAGE_MAGIC_CODE or size < RECORD_FIXED_SIZE or pos + size > end:
        return -1
    if verify:
        size = check_record(buf, pos, check_crc=True, physical_offset=base_offset + pos)
        return size if size > 0 else -1
    return size


def chained_records(buf: bytes) -> np.ndarray:
    """The starts of the records that fill ``buf`` one after another, each gathered from
    anywhere in a CommitLog (a pull's answer): the sizes alone chain them, as their
    PHYSICALOFFSETs are not their positions here. Raises CorruptSegmentError at the first
    position that is not a record's start or a record that runs past the end;
    :func:`record_layout` checks the rest of each record in bulk."""
    starts: list[int] = []
    pos, end = 0, len(buf)
    unpack = _SIZE_MAGIC.unpack_from
    while pos < end:
        size, magic = unpack(buf, pos) if pos + 8 <= end else (0, 0)
        if magic != MESSAGE_MAGIC_CODE or size < RECORD_FIXED_SIZE or pos + size > end:
            raise CorruptSegmentError(f"no record at byte {pos}", pos)
        starts.append(pos)
        pos += size
    return np.asarray(starts, dtype=np.int64)


def _find_first(buf: Buffer, subs: tuple[bytes, ...], start: int, end: int) -> int:
    """Where the first of ``subs`` (all of one length) starts in ``buf[start:end]``, -1 if
    none does; reads nothing outside that range, a window copied at a time. mmap.find itself
    reads the byte after its range before CPython 3.11.5 (gh-105235; Debian 12's python3.11
    is 3.11.2): at the end of a CommitLog file's mapping that is past the file, and the
    process dies of SIGBUS or SIGSEGV."""
    overlap = len(subs[0]) - 1
    with memoryview(buf) as view:
        while start < end:
            stop = min(end, start + _FIND_WINDOW + overlap)
            window = bytes(view[start:stop])
            hits = [at for at in (window.find(sub) for sub in subs) if at >= 0]
            if hits:
                return start + min(hits)
            if stop == end:
                break
            start += _FIND_WINDOW
    return -1


def _resync(buf: Buffer, pos: int, end: int, base_offset: int) -> int:
    """The next position after ``pos`` where a verified record or a blank tail starts."""
    probe = pos + 1
    while probe < end:
        hit = _find_first(buf, (_MAGIC, _BLANK), probe + 4, end)
        if hit < 0:
            return end
        cand = hit - 4
        if buf[cand + 4 : cand + 8] == _BLANK:
            size = _SIZE_MAGIC.unpack_from(buf, cand)[0]
            if cand + size == end:
                return cand
        elif check_record(buf, cand, check_crc=True, physical_offset=base_offset + cand) > 0:
            return cand
        probe = cand + 1
    return end


def walk_records(
    buf: Buffer, base_offset: int, start: int, end: int, *, verify: bool, on_bad: OnBad
) -> Walk:
    """Records in ``buf[start:end]``; ``base_offset`` is the CommitLog offset of ``buf[0]``.

    ``verify`` checks each record fully (lengths, body CRC, PHYSICALOFFSET); without it only
    magic code and size are checked here and the decoder validates the rest in bulk."""
    fast = _chain(buf, base_offset, start, end, verify)
    if fast is not None:
        return fast
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
