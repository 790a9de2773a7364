"""Decoding the body of SEND_BATCH_MESSAGE (RocketMQ's MessageDecoder.encodeMessages format).

The producer concatenates its messages, each as::

    | TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES |

TOTALSIZE = 22 + len(body) + len(properties); magic and CRC are not checked (clients send
zeros; the broker computes the stored CRC). Topic and queue come from the request header.
"""

from __future__ import annotations

import struct
from typing import Final

from lakemq.errors import MessageIllegalError

__all__ = ["BatchEntry", "decode_batch"]

_HEAD: Final = struct.Struct(">iiiii")
_PROPS_LEN: Final = struct.Struct(">h")
_FIXED: Final = _HEAD.size + _PROPS_LEN.size  # 22


class BatchEntry:
    """One message of a batch. A plain slotted class: a frozen dataclass's ``__init__`` costs
    three times as much, and a batch builds one per message."""

    __slots__ = ("body", "flag", "properties")

    def __init__(self, flag: int, body: bytes, properties: str) -> None:
        self.flag = flag
        self.body = body
        self.properties = properties

    def __repr__(self) -> str:
        return f"BatchEntry(flag={self.flag}, body={len(self.body)} bytes, properties={self.properties!r})"


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """All entries of a batch body; MessageIllegalError if any length is inconsistent."""
    # Slicing bytes copies once; a memoryview slice would need a second copy into bytes.
    buf = data if isinstance(data, bytes) else bytes(data)
    size = len(buf)
    entries: list[BatchEntry] = []
    append, head_at, props_len_at = entries.append, _HEAD.unpack_from, _PROPS_LEN.unpack_from
    pos = 0
    while pos < size:
        if size - pos < _FIXED:
            raise MessageIllegalError(f"batch entry at {pos}: {size - pos} trailing bytes")
        total, _magic, _crc, flag, body_len = head_at(buf, pos)
        end = pos + total
        if total < _FIXED or end > size or body_len < 0 or _FIXED + body_len > total:
            raise MessageIllegalError(f"batch entry at {pos}: bad sizes (total {total}, body {body_len})")
        p = pos + _HEAD.size + body_len  # the properties' length
        (props_len,) = props_len_at(buf, p)
        if p + 2 + props_len != end:  # a negative length cannot add up either
            raise MessageIllegalError(f"batch entry at {pos}: lengths do not add up to {total}")
        try:
            properties = buf[p + 2:end].decode()
        except UnicodeDecodeError as exc:
            raise MessageIllegalError(f"batch entry at {pos}: properties are not UTF-8") from exc
        append(BatchEntry(flag, buf[pos + _HEAD.size:p], properties))
        pos = end
    if not entries:
        raise MessageIllegalError("empty batch")
    return entries
