"""Decoding the body of SEND_BATCH_MESSAGE (RocketMQ's MessageDecoder.encodeMessages format).

The producer concatenates its messages, each as::

    | TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES |

TOTALSIZE = 22 + len(body) + len(properties); magic and CRC are not checked (clients send
zeros; the broker computes the stored CRC). Topic and queue come from the request header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from lakemq.errors import MessageIllegalError

__all__ = ["BatchEntry", "decode_batch"]

_HEAD: Final = struct.Struct(">iiiii")
_PROPS_LEN: Final = struct.Struct(">h")
_FIXED: Final = _HEAD.size + _PROPS_LEN.size  # 22


@dataclass(frozen=True, slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """All entries of a batch body; MessageIllegalError if any length is inconsistent."""
    # Slicing bytes copies once; a memoryview slice would need a second copy into bytes.
    buf = data if isinstance(data, bytes) else bytes(data)
    size = len(buf)
    entries: list[BatchEntry] = []
    pos = 0
    while pos < size:
        if size - pos < _FIXED:
            raise MessageIllegalError(f"batch entry at {pos}: {size - pos} trailing bytes")
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(buf, pos)
        if total < _FIXED or pos + total > size or body_len < 0 or _HEAD.size + body_len + 2 > total:
            raise MessageIllegalError(f"batch entry at {pos}: bad sizes (total {total}, body {body_len})")
        p = pos + _HEAD.size
        body = buf[p : p + body_len]
        p += body_len
        (props_len,) = _PROPS_LEN.unpack_from(buf, p)
        p += 2
        if props_len < 0 or p + props_len != pos + total:
            raise MessageIllegalError(f"batch entry at {pos}: lengths do not add up to {total}")
        try:
            properties = buf[p : p + props_len].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageIllegalError(f"batch entry at {pos}: properties are not UTF-8") from exc
        entries.append(BatchEntry(flag, body, properties))
        pos += total
    if not entries:
        raise MessageIllegalError("empty batch")
    return entries
