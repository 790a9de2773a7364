"""Walking CommitLog records: what recovery and the reput (dispatch) service read from each.

The records are parsed by the compiled reader (:func:`lakemq.store._scan.scan_records`)
into columns; DispatchRequests are made from them for the users that take one record at a
time. ``read_dispatch_request`` is RocketMQ's checkMessageAndReturnSize: ``msg_size > 0`` is
a good record, ``0`` the blank record that ends a file, ``-1`` a bad one (where recovery stops).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from lakemq.common.message import string_to_properties
from lakemq.common.record import BLANK_MAGIC_CODE, BODY_POS, MESSAGE_MAGIC_CODE, RECORD_FIXED_SIZE, crc32
from lakemq.store._scan import DispatchBatch, scan_records
from lakemq.store.delay_levels import DelayLevels

__all__ = [
    "DispatchBatch",
    "DispatchRequest",
    "delay_tags_code",
    "iter_dispatch_requests",
    "read_dispatch_request",
    "read_dispatch_requests",
    "requests_of",
    "scan_valid_end",
]

_SIZE_MAGIC = struct.Struct(">iI")
# What recovery checks of a record: TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, BODYLEN.
_SCAN_FIELDS = struct.Struct(">iIi16xq48xi")
_ITER_BATCH = 1024


@dataclass(slots=True)
class DispatchRequest:
    """One CommitLog record as the ConsumeQueue and IndexFile builders need it. Not frozen:
    a frozen dataclass's __init__ costs several microseconds, and dispatch builds one per
    record."""

    msg_size: int
    success: bool = True
    topic: str = ""
    queue_id: int = 0
    commit_log_offset: int = 0
    tags_code: int = 0
    store_timestamp: int = 0
    consume_queue_offset: int = 0
    keys: str = ""
    uniq_key: str | None = None
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    born_timestamp: int = 0
    properties: dict[str, str] = field(default_factory=dict)


_BAD = DispatchRequest(msg_size=-1, success=False)


def delay_tags_code(delay_levels: DelayLevels) -> Callable[[str, int], int | None]:
    """For :func:`scan_records`: a SCHEDULE_TOPIC_XXXX record's tags code is its delivery time."""

    def code(level: str, store_timestamp: int) -> int | None:
        if level.isdigit() and int(level) > 0:
            return delay_levels.deliver_timestamp(int(level), store_timestamp)
        return None

    return code


def read_dispatch_requests(
    buf: bytes | bytearray | memoryview,
    pos: int,
    physical_offset: int,
    *,
    max_count: int,
    check_crc: bool = False,
    delay_levels: DelayLevels | None = None,
) -> DispatchBatch:
    """Up to ``max_count`` consecutive good records from ``buf[pos]`` (at CommitLog offset
    ``physical_offset``) as columns (the compiled reader); ``stop`` says why it ended: 1 count
    or data exhausted, 0 a blank record (the file's end), -1 a bad record."""
    return scan_records(buf, pos, physical_offset, max_count, check_crc=check_crc,
                        delay_tags_code=delay_tags_code(delay_levels) if delay_levels is not None else None)


def requests_of(batch: DispatchBatch) -> list[DispatchRequest]:
    """The batch's records as DispatchRequests (properties parsed), for one-at-a-time users."""
    requests: list[DispatchRequest] = batch.requests(DispatchRequest, string_to_properties)
    return requests


def read_dispatch_request(
    buf: bytes | bytearray | memoryview,
    pos: int,
    physical_offset: int,
    *,
    check_crc: bool,
    delay_levels: DelayLevels | None = None,
) -> DispatchRequest:
    """The record at ``buf[pos]``, which lives at CommitLog offset ``physical_offset``."""
    batch = read_dispatch_requests(buf, pos, physical_offset, max_count=1, check_crc=check_crc,
                                   delay_levels=delay_levels)
    if len(batch):
        return requests_of(batch)[0]
    if batch.stop == 0:
        return DispatchRequest(msg_size=0, commit_log_offset=physical_offset)
    return _BAD


def iter_dispatch_requests(
    buf: bytes | bytearray | memoryview,
    start: int,
    base_offset: int,
    *,
    check_crc: bool,
    delay_levels: DelayLevels | None = None,
) -> Iterator[DispatchRequest]:
    """Records from ``buf[start]`` (``buf[0]`` is at CommitLog offset ``base_offset``) up to
    and including the first blank or bad one, which ends the walk."""
    pos = start
    while True:
        batch = read_dispatch_requests(buf, pos, base_offset + pos, max_count=_ITER_BATCH,
                                       check_crc=check_crc, delay_levels=delay_levels)
        yield from requests_of(batch)
        pos = batch.end_pos
        if batch.stop == 0:
            yield DispatchRequest(msg_size=0, commit_log_offset=base_offset + pos)
            return
        if batch.stop < 0 or len(batch) < _ITER_BATCH:  # a bad record, or too short for one
            yield _BAD
            return


def scan_valid_end(buf: bytes | bytearray | memoryview, start: int, base_offset: int, *, check_crc: bool) -> tuple[int, bool]:
    """Fast walk for recovery: returns (position after the last good record, reached a blank
    record). Checks exactly what check_record checks (structure, position, optionally CRC),
    inlined: one unpack of the fields it needs per record; decodes nothing."""
    pos = start
    end = len(buf)
    unpack = _SCAN_FIELDS.unpack_from
    head_size = _SCAN_FIELDS.size
    while True:
        if pos + head_size > end:  # too short for a message: a blank record or the end
            if pos + 8 > end:
                return pos, False
            size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            return pos, magic == BLANK_MAGIC_CODE and size > 0
        size, magic, crc, phy, body_len = unpack(buf, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return pos, magic == BLANK_MAGIC_CODE and size > 0
        record_end = pos + size
        topic_pos = pos + BODY_POS + body_len
        if (size < RECORD_FIXED_SIZE or record_end > end or body_len < 0 or topic_pos + 3 > record_end
                or phy != base_offset + pos):
            return pos, False
        props_pos = topic_pos + 1 + buf[topic_pos]
        if props_pos + 2 > record_end:
            return pos, False
        props_len = buf[props_pos] << 8 | buf[props_pos + 1]
        if props_len >= 0x8000 or props_pos + 2 + props_len != record_end:
            return pos, False
        if check_crc and crc32(buf[pos + BODY_POS : topic_pos]) & 0x7FFFFFFF != crc:
            return pos, False
        pos = record_end
