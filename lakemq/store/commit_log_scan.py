"""Walking CommitLog records: what recovery and the reput (dispatch) service read from each.

``read_dispatch_request`` is RocketMQ's checkMessageAndReturnSize: ``msg_size > 0`` is a good
record, ``0`` the blank record that ends a file, ``-1`` a bad one (where recovery stops).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from lakemq.common.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    string_to_properties,
    tags_hash_code,
)
from lakemq.common.record import (
    BLANK_MAGIC_CODE,
    BODY_POS,
    HEAD,
    HEAD_BODY_LEN,
    MESSAGE_MAGIC_CODE,
    RECORD_FIXED_SIZE,
    check_record,
    crc32,
)
from lakemq.store.delay_levels import SCHEDULE_TOPIC, DelayLevels

__all__ = [
    "DispatchRequest",
    "iter_dispatch_requests",
    "read_dispatch_request",
    "read_dispatch_requests",
    "scan_valid_end",
]

_BODY_LEN = struct.Struct(">i")
_PROPS_LEN = struct.Struct(">h")
_SIZE_MAGIC = struct.Struct(">iI")
# What recovery checks of a record: TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, BODYLEN.
_SCAN_FIELDS = struct.Struct(">iIi16xq48xi")
_TAGS = MessageConst.TAGS
_KEYS = MessageConst.KEYS
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_DELAY = MessageConst.DELAY_TIME_LEVEL
_PROPERTY_SEPARATOR = PROPERTY_SEPARATOR
_NAME_VALUE_SEPARATOR = NAME_VALUE_SEPARATOR
# Topics and tags repeat from record to record: decode and hash each once.
_CACHE_MAX = 65_536
_topic_names: dict[bytes, str] = {}
_tags_codes: dict[str, int] = {}


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


def _tags_code(tags: str | None) -> int:
    if not tags:
        return 0
    code = _tags_codes.get(tags)
    if code is None:
        if len(_tags_codes) > _CACHE_MAX:
            _tags_codes.clear()
        code = _tags_codes[tags] = tags_hash_code(tags)
    return code


def read_dispatch_requests(
    buf: bytes | bytearray | memoryview,
    pos: int,
    physical_offset: int,
    *,
    max_count: int,
    delay_levels: DelayLevels | None = None,
) -> tuple[list[DispatchRequest], int, int]:
    """Up to ``max_count`` consecutive good records from ``buf[pos]`` (at CommitLog offset
    ``physical_offset``), checked as read_dispatch_request does without CRC, in one loop.
    Returns (requests, position after them, why it stopped): 1 count or data exhausted,
    0 a blank record (the file's end), -1 a bad record."""
    requests: list[DispatchRequest] = []
    add = requests.append
    end = len(buf)
    base = physical_offset - pos
    unpack_head = HEAD_BODY_LEN.unpack_from
    topic_names = _topic_names
    tags_codes = _tags_codes
    head_size = HEAD_BODY_LEN.size
    for _ in range(max_count):
        if pos + head_size > end:  # too short for a message: a blank record, or the data's end
            if pos + 8 > end:
                return requests, pos, 1
            size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
            return requests, pos, 0 if magic == BLANK_MAGIC_CODE and size > 0 else -1
        (size, magic, _, queue_id, _, queue_offset, phy, sys_flag, born_ts, _, _, store_ts, _, _, _, prepared,
         body_len) = unpack_head(buf, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return requests, pos, 0 if magic == BLANK_MAGIC_CODE and size > 0 else -1
        record_end = pos + size
        topic_pos = pos + BODY_POS + body_len
        if (size < RECORD_FIXED_SIZE or record_end > end or body_len < 0 or topic_pos + 3 > record_end
                or phy != base + pos):
            return requests, pos, -1
        props_pos = topic_pos + 1 + buf[topic_pos]
        if props_pos + 2 > record_end:
            return requests, pos, -1
        props_len = buf[props_pos] << 8 | buf[props_pos + 1]  # a signed short: >= 0x8000 is negative
        if props_len >= 0x8000 or props_pos + 2 + props_len != record_end:
            return requests, pos, -1
        raw_topic = bytes(buf[topic_pos + 1 : props_pos])
        topic = topic_names.get(raw_topic)
        if topic is None:
            if len(topic_names) > _CACHE_MAX:
                topic_names.clear()
            topic = topic_names[raw_topic] = raw_topic.decode("utf-8", "replace")
        if props_len:
            properties = {}
            for item in str(buf[props_pos + 2 : record_end], "utf-8", "replace").split(_PROPERTY_SEPARATOR):
                name, sep, value = item.partition(_NAME_VALUE_SEPARATOR)  # string_to_properties inlined
                if sep:
                    properties[name] = value
            tags = properties.get(_TAGS)
            tags_code = (tags_codes.get(tags) or _tags_code(tags)) if tags else 0
            if topic == SCHEDULE_TOPIC and delay_levels is not None:
                level = properties.get(_DELAY, "")
                if level.isdigit() and int(level) > 0:
                    tags_code = delay_levels.deliver_timestamp(int(level), store_ts)
            add(DispatchRequest(size, True, topic, queue_id, phy, tags_code, store_ts, queue_offset,
                                properties.get(_KEYS, ""), properties.get(_UNIQ_KEY), sys_flag, prepared,
                                born_ts, properties))
        else:
            add(DispatchRequest(size, True, topic, queue_id, phy, 0, store_ts, queue_offset, "", None, sys_flag,
                                prepared, born_ts, {}))
        pos = record_end
    return requests, pos, 1
