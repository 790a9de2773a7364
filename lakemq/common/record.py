"""The CommitLog record: RocketMQ 4.x's store format, which is also the wire format of pulls.

All integers are big endian; hosts are IPv4 (4 bytes) plus a 4-byte port::

     0 +------------+------------+------------+------------+------------+
       | TOTALSIZE  | MAGICCODE  |  BODYCRC   |  QUEUEID   |    FLAG    |
    20 +------------+------------+------------+------------+------------+
       |       QUEUEOFFSET       |     PHYSICALOFFSET      |  SYSFLAG   |
    40 +-------------------------+-------------------------+------------+
       |     BORNTIMESTAMP       |  BORNHOST ip + port     |
    56 +-------------------------+-------------------------+
       |     STORETIMESTAMP      |  STOREHOST ip + port    |
    72 +------------+------------+-------------------------+
       | RECONSUME  | PREPARED TRANSACTION OFFSET (8)      |
    84 +------------+--------------------------------------+
       | BODYLEN 4 | BODY ... | TOPICLEN 1 | TOPIC ... | PROPLEN 2 | PROPERTIES ... |
       +-----------------------------------------------------------------------------+

    TOTALSIZE = 91 + len(body) + len(topic) + len(properties)

RECONSUMETIMES is 4 bytes, as RocketMQ 4.x's MessageDecoder reads it (some descriptions of
the format give 8; docs/FORMATS.md). A file's unused tail is one blank record: TOTALSIZE = bytes left,
MAGICCODE = 0xcbd43194.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from mmap import mmap
from typing import Final

from isal.isal_zlib import crc32

from lakemq.common import _pulled
from lakemq.common.compression import decompress_body
from lakemq.common.message import MessageConst, MessageExt, MessageSysFlag, string_to_properties
from lakemq.errors import RecordError

__all__ = [
    "BLANK_MAGIC_CODE",
    "BODY_CRC_POS",
    "BODY_LEN_POS",
    "BODY_POS",
    "BORN_HOST_POS",
    "BORN_PORT_POS",
    "BORN_TIMESTAMP_POS",
    "FLAG_POS",
    "HEAD",
    "HEAD_BODY_LEN",
    "MAGIC_CODE_POS",
    "MESSAGE_MAGIC_CODE",
    "PHYSICAL_OFFSET_POS",
    "PREPARED_TRANSACTION_OFFSET_POS",
    "PROPS_LEN",
    "QUEUE_ID_POS",
    "QUEUE_OFFSET_POS",
    "RECONSUME_TIMES_POS",
    "RECORD_FIXED_SIZE",
    "STORE_HOST_POS",
    "STORE_PORT_POS",
    "STORE_TIMESTAMP_POS",
    "SYS_FLAG_POS",
    "TOTAL_SIZE_POS",
    "RecordHeader",
    "body_crc",
    "check_record",
    "crc32",
    "create_message_id",
    "decode_host",
    "decode_message_id",
    "decode_pulled",
    "decode_record",
    "encode_host",
    "encode_record",
    "iter_records",
    "packed_host",
    "patch_record",
    "read_header",
    "record_size",
]

MESSAGE_MAGIC_CODE: Final = 0xDAA320A7
BLANK_MAGIC_CODE: Final = 0xCBD43194

# total, magic, crc, queue id, flag, queue offset, physical offset, sys flag,
# born ts, born ip, born port, store ts, store ip, store port, reconsume times, prepared tx off
HEAD: Final = struct.Struct(">iIiiiqqiq4siq4siiq")
# HEAD and BODYLEN together: everything before the body in one pack.
HEAD_BODY_LEN: Final = struct.Struct(">iIiiiqqiq4siq4siiqi")
BODY_LEN: Final = struct.Struct(">i")
PROPS_LEN: Final = struct.Struct(">h")
RECORD_FIXED_SIZE: Final = HEAD.size + 4 + 1 + 2  # 91

# Where each fixed field starts (HEAD's layout); the compiled store names the same positions
# (lakemq/store/_layout.pxd, checked by tests/store/test_layout.py).
TOTAL_SIZE_POS: Final = 0
MAGIC_CODE_POS: Final = 4
BODY_CRC_POS: Final = 8
QUEUE_ID_POS: Final = 12
FLAG_POS: Final = 16
QUEUE_OFFSET_POS: Final = 20
PHYSICAL_OFFSET_POS: Final = 28
SYS_FLAG_POS: Final = 36
BORN_TIMESTAMP_POS: Final = 40
BORN_HOST_POS: Final = 48
BORN_PORT_POS: Final = 52
STORE_TIMESTAMP_POS: Final = 56
STORE_HOST_POS: Final = 64
STORE_PORT_POS: Final = 68
RECONSUME_TIMES_POS: Final = 72
PREPARED_TRANSACTION_OFFSET_POS: Final = 76
BODY_LEN_POS: Final = 84
BODY_POS: Final = HEAD.size + 4  # 88

_HOST = struct.Struct(">4si")
_SIZE_MAGIC = struct.Struct(">iI")
_CRC = struct.Struct(">i")
_PATCH_OFFSETS = struct.Struct(">qq")
_PATCH_TIMESTAMP = struct.Struct(">q")
_LONG = struct.Struct(">q")
_TOPIC_LEN: Final = tuple(bytes([n]) for n in range(256))
_MSG_ID = struct.Struct(">4siq")


def body_crc(body: bytes) -> int:
    """RocketMQ's UtilAll.crc32: CRC-32 of the body with the sign bit cleared. The CRC-32 is
    zlib's, computed by ISA-L (SIMD: about 4x zlib's speed on a 1 KiB body, the put path's
    largest single cost)."""
    return crc32(body) & 0x7FFFFFFF


def record_size(body_len: int, topic_len: int, properties_len: int) -> int:
    return RECORD_FIXED_SIZE + body_len + topic_len + properties_len


def encode_host(host: str) -> tuple[bytes, int]:
    """``"ip:port"`` -> (4 ip bytes, port)."""
    ip, _, port = host.rpartition(":")
    return socket.inet_aton(ip or "0.0.0.0"), int(port or 0)


def decode_host(ip: bytes, port: int) -> str:
    return f"{socket.inet_ntoa(ip)}:{port}"


def packed_host(packed: int) -> str:
    """``"ip:port"`` of a host field read as one unsigned 8-byte integer (ip << 32 | port)."""
    return decode_host(struct.pack(">I", packed >> 32), packed & 0xFFFFFFFF)


def create_message_id(store_ip: bytes, store_port: int, commit_log_offset: int) -> str:
    """The 16-byte offset message id (store host + CommitLog offset), upper-case hex."""
    return _MSG_ID.pack(store_ip, store_port, commit_log_offset).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int]:
    """Offset message id -> ("ip:port", CommitLog offset).

    A unique key (the id a producer gets back) has the same length; its bytes 4-7 (pid and
    a random number) read as a port above 65535, so it is refused here, never dialled."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise RecordError(f"message id {msg_id!r} is not hex") from exc
    if len(raw) != _MSG_ID.size:
        raise RecordError(f"message id {msg_id!r} is not 16 bytes")
    ip, port, offset = _MSG_ID.unpack(raw)
    if not 0 <= port <= 0xFFFF or offset < 0:
        raise RecordError(f"{msg_id} is not an offset message id (store host and CommitLog offset): "
                          "it is probably a unique key, the id a producer gets back")
    return decode_host(ip, port), offset


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    body: bytes,
    flag: int,
    properties: bytes,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[bytes, int],
    store_host: tuple[bytes, int],
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    crc: int | None = None,
) -> bytearray:
    """Build one record. The store patches queue offset, physical offset and store time in
    place (``QUEUE_OFFSET_POS`` ...) when it appends, so the rest is built outside its lock."""
    body_len, topic_len, props_len = len(body), len(topic), len(properties)
    head = HEAD_BODY_LEN.pack(
        RECORD_FIXED_SIZE + body_len + topic_len + props_len, MESSAGE_MAGIC_CODE,
        crc32(body) & 0x7FFFFFFF if crc is None else crc, queue_id, flag, queue_offset,
        physical_offset, sys_flag, born_timestamp, born_host[0], born_host[1], store_timestamp,
        store_host[0], store_host[1], reconsume_times, prepared_transaction_offset, body_len,
    )
    # One join: the cheapest way in CPython to lay the pieces out contiguously.
    return bytearray().join((head, body, _TOPIC_LEN[topic_len], topic, PROPS_LEN.pack(props_len), properties))


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """What recovery and dispatch need from a record without decoding the body."""

    total_size: int
    magic: int


def read_header(buf: bytes | bytearray | memoryview, pos: int) -> RecordHeader:
    size, magic = struct.unpack_from(">iI", buf, pos)
    return RecordHeader(size, magic)


def patch_record(
    buf: bytearray | memoryview, pos: int, queue_offset: int, physical_offset: int, store_timestamp: int
) -> None:
    """Fill in the three fields only the appender knows, in a record built by encode_record."""
    _PATCH_OFFSETS.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset, physical_offset)
    _PATCH_TIMESTAMP.pack_into(buf, pos + STORE_TIMESTAMP_POS, store_timestamp)


def check_record(
    buf: bytes | bytearray | memoryview | mmap, pos: int, *, check_crc: bool, physical_offset: int | None = None
) -> int:
    """Validate the record at ``pos`` without decoding it: its size when good, 0 for a blank
    (end-of-file) record, -1 for anything else (bad magic, lengths that do not add up, a
    record running past ``buf``, a CRC mismatch, or a PHYSICALOFFSET field other than
    ``physical_offset`` when given). Recovery stops at the first -1."""
    end = len(buf)
    if pos + 8 > end:  # a blank record can be as short as 8 bytes
        return -1
    size: int
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        return 0 if magic == BLANK_MAGIC_CODE and size > 0 else -1
    if size < RECORD_FIXED_SIZE or pos + size > end:
        return -1
    (body_len,) = BODY_LEN.unpack_from(buf, pos + HEAD.size)
    topic_pos = pos + BODY_POS + body_len
    if body_len < 0 or topic_pos + 3 > pos + size:
        return -1
    props_pos = topic_pos + 1 + buf[topic_pos]
    if props_pos + 2 > pos + size:
        return -1
    (props_len,) = PROPS_LEN.unpack_from(buf, props_pos)
    if props_len < 0 or props_pos + 2 + props_len != pos + size:
        return -1
    if physical_offset is not None and _LONG.unpack_from(buf, pos + PHYSICAL_OFFSET_POS)[0] != physical_offset:
        return -1
    if check_crc and crc32(buf[pos + BODY_POS : topic_pos]) & 0x7FFFFFFF != _CRC.unpack_from(buf, pos + 8)[0]:
        return -1
    return size


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = False,
    read_body: bool = True,
    decompress: bool = False,
) -> MessageExt:
    """Decode the record starting at ``pos``. Raises RecordError on anything malformed."""
    available = len(buf) - pos
    if available < RECORD_FIXED_SIZE:
        raise RecordError(f"truncated record at {pos}: {available} bytes")
    if type(buf) is not bytes:
        # One copy of this record up front (every field below is then sliced from bytes);
        # ``base`` keeps the error messages' positions those of the caller's buffer.
        (claimed,) = BODY_LEN.unpack_from(buf, pos)
        base, buf, pos = pos, bytes(buf[pos:pos + max(claimed, RECORD_FIXED_SIZE)]), 0
    else:
        base = 0
    (size, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
     born_host, store_ts, store_host, reconsume, prepared, body_len) = _DECODE_HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise RecordError(f"bad magic 0x{magic:08x} at {base + pos}")
    end = pos + size
    if size < RECORD_FIXED_SIZE or size > available:
        raise RecordError(f"bad total size {size} at {base + pos} ({available} bytes available)")
    p = pos + BODY_POS
    if body_len < 0 or p + body_len + 3 > end:
        raise RecordError(f"bad body length {body_len} at {base + pos}")
    body = buf[p : p + body_len] if read_body or check_crc else b""
    p += body_len
    topic_len = buf[p]
    p += 1
    if p + topic_len + 2 > end:
        raise RecordError(f"bad topic length {topic_len} at {base + pos}")
    topic = _text(buf[p : p + topic_len])
    p += topic_len
    (props_len,) = PROPS_LEN.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        raise RecordError(f"record at {base + pos}: lengths do not add up to total size {size}")
    properties = string_to_properties(buf[p:end].decode("utf-8", "replace")) if props_len else {}
    if check_crc and body_crc(body) != crc:
        raise RecordError(f"body CRC mismatch at {base + pos}")
    if decompress and sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        body = decompress_body(body, sys_flag)
    # Positional, in MessageExt's field order (a keyword call costs 0.7 us more per record;
    # tests/common/test_record_field_order.py pins the order).
    return MessageExt(
        topic, body if read_body else b"", flag, properties, queue_id, size, queue_offset, sys_flag, born_ts,
        _host(born_host), store_ts, _host(store_host),
        (store_host + _LONG.pack(physical_offset)).hex().upper(),  # create_message_id's
        physical_offset, crc, reconsume, prepared,
    )


# HEAD_BODY_LEN with each host as one 8-byte field (ip + port): the key of _host's cache.
_DECODE_HEAD: Final = struct.Struct(">iIiiiqqiq8sq8siqi")
_HOSTS: dict[bytes, str] = {}
_TEXTS: dict[bytes, str] = {}


def _host(raw: bytes) -> str:
    """``"ip:port"`` of an 8-byte host field; a pull's records mostly share two or three hosts."""
    host = _HOSTS.get(raw)
    if host is None:
        if len(_HOSTS) >= 4096:  # bounded: a broker sees many producers' born hosts
            _HOSTS.clear()
        host = _HOSTS[raw] = decode_host(raw[:4], int.from_bytes(raw[4:], "big", signed=True))
    return host


def _text(raw: bytes) -> str:
    """A topic's text; records of one pull share it."""
    text = _TEXTS.get(raw)
    if text is None:
        if len(_TEXTS) >= 4096:
            _TEXTS.clear()
        text = _TEXTS[raw] = raw.decode("utf-8", "replace")
    return text


def iter_records(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = False, decompress: bool = False
) -> Iterator[MessageExt]:
    """Decode consecutive records (a pull response body); stops at a blank record."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    pos = 0
    end = len(buf)
    size_magic = _SIZE_MAGIC.unpack_from
    while pos + 8 <= end:
        size, magic = size_magic(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return
        yield decode_record(buf, pos, check_crc=check_crc, decompress=decompress)
        pos += size


# The compiled decoder of pull responses (lakemq/common/_pulled.pyx) reads with this module's
# definitions; decode_pulled answers None for whatever decode_record should judge.
_pulled.bind(MessageExt, _host, decompress_body, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.TAGS)
decode_pulled = _pulled.decode_pulled
