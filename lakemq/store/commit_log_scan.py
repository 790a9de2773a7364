"""Walking CommitLog records: what recovery and the reput (dispatch) service read from each.

``read_dispatch_request`` is RocketMQ's checkMessageAndReturnSize: ``msg_size > 0`` is a good
record, ``0`` the blank record that ends a file, ``-1`` a bad one (where recovery stops).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from lakemq.common.message import MessageConst, string_to_properties, tags_hash_code
from lakemq.common.record import BODY_POS, HEAD, check_record
from lakemq.store.delay_levels import SCHEDULE_TOPIC, DelayLevels

__all__ = ["DispatchRequest", "read_dispatch_request", "iter_dispatch_requests", "scan_valid_end"]

_BODY_LEN = struct.Struct(">i")
_PROPS_LEN = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """One CommitLog record as the ConsumeQueue and IndexFile builders need it."""

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


def read_dispatch_request(
    buf: bytes | bytearray | memoryview,
    pos: int,
    physical_offset: int,
    *,
    check_crc: bool,
    delay_levels: DelayLevels | None = None,
) -> DispatchRequest:
    """The record at ``buf[pos]``, which lives at CommitLog offset ``physical_offset``."""
    size = check_record(buf, pos, check_crc=check_crc, physical_offset=physical_offset)
    if size < 0:
        return _BAD
    if size == 0:
        return DispatchRequest(msg_size=0, commit_log_offset=physical_offset)
    (_, _, _, queue_id, _, queue_offset, _, sys_flag, born_ts, _, _, store_ts, _, _, _,
     prepared) = HEAD.unpack_from(buf, pos)
    (body_len,) = _BODY_LEN.unpack_from(buf, pos + HEAD.size)
    topic_pos = pos + BODY_POS + body_len
    topic_len = buf[topic_pos]
    topic = bytes(buf[topic_pos + 1 : topic_pos + 1 + topic_len]).decode("utf-8", "replace")
    props_pos = topic_pos + 1 + topic_len
    (props_len,) = _PROPS_LEN.unpack_from(buf, props_pos)
    properties = (
        string_to_properties(bytes(buf[props_pos + 2 : props_pos + 2 + props_len]).decode("utf-8", "replace"))
        if props_len else {}
    )
    tags_code = tags_hash_code(properties.get(MessageConst.TAGS))
    if topic == SCHEDULE_TOPIC and delay_levels is not None:
        level = properties.get(MessageConst.DELAY_TIME_LEVEL, "")
        if level.isdigit() and int(level) > 0:
            tags_code = delay_levels.deliver_timestamp(int(level), store_ts)
    return DispatchRequest(
        msg_size=size,
        topic=topic,
        queue_id=queue_id,
        commit_log_offset=physical_offset,
        tags_code=tags_code,
        store_timestamp=store_ts,
        consume_queue_offset=queue_offset,
        keys=properties.get(MessageConst.KEYS, ""),
        uniq_key=properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        sys_flag=sys_flag,
        prepared_transaction_offset=prepared,
        born_timestamp=born_ts,
        properties=properties,
    )


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
        req = read_dispatch_request(buf, pos, base_offset + pos, check_crc=check_crc, delay_levels=delay_levels)
        yield req
        if req.msg_size <= 0:
            return
        pos += req.msg_size


def scan_valid_end(buf: bytes | bytearray | memoryview, start: int, base_offset: int, *, check_crc: bool) -> tuple[int, bool]:
    """Fast walk for recovery: returns (position after the last good record, reached a blank
    record). Checks structure, position and (optionally) CRC; decodes nothing."""
    pos = start
    check = check_record
    while True:
        size = check(buf, pos, check_crc=check_crc, physical_offset=base_offset + pos)
        if size <= 0:
            return pos, size == 0
        pos += size
