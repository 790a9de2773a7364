"""The body of SEND_BATCH_MESSAGE (RocketMQ's MessageDecoder.encodeMessages), both ways.

The producer concatenates its messages, each as::

    | TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0) | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES |

TOTALSIZE = 22 + len(body) + len(properties). Magic and CRC are not checked (clients send
zeros; the broker computes the stored CRC). Topic and queue come from the request header.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

from lakemq.common.message import Message, properties_to_string
from lakemq.errors import MessageIllegalError

__all__ = ["BATCH_ENTRY_FIXED_SIZE", "BatchEntry", "decode_batch", "encode_messages"]

_HEAD: Final = struct.Struct(">iiiii")
_PROPS_LEN: Final = struct.Struct(">h")
BATCH_ENTRY_FIXED_SIZE: Final = _HEAD.size + _PROPS_LEN.size  # 22
_MAX_PROPERTIES: Final = 0x7FFF  # PROPLEN is a signed short


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


def encode_messages(messages: Iterable[Message]) -> bytes:
    """The batch body of ``messages`` (their topics are the request's, not encoded here)."""
    parts: list[bytes] = []  # every entry's pieces, joined once
    append, head, props_len = parts.append, _HEAD.pack, _PROPS_LEN.pack
    for msg in messages:
        props = properties_to_string(msg.properties).encode("utf-8")
        if len(props) > _MAX_PROPERTIES:
            raise MessageIllegalError(f"properties of {len(props)} bytes exceed {_MAX_PROPERTIES}")
        body = msg.body
        append(head(BATCH_ENTRY_FIXED_SIZE + len(body) + len(props), 0, 0, msg.flag, len(body)))
        append(body)
        append(props_len(len(props)))
        append(props)
    return b"".join(parts)


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """All entries of a batch body; MessageIllegalError if any length is inconsistent."""
    # Slicing bytes copies once; a memoryview slice would need a second copy into bytes.
    buf = data if isinstance(data, bytes) else bytes(data)
    size = len(buf)
    entries: list[BatchEntry] = []
    append, head_at, props_len_at = entries.append, _HEAD.unpack_from, _PROPS_LEN.unpack_from
    pos = 0
    while pos < size:
        if size - pos < BATCH_ENTRY_FIXED_SIZE:
            raise MessageIllegalError(f"batch entry at {pos}: {size - pos} trailing bytes")
        total, _magic, _crc, flag, body_len = head_at(buf, pos)
        end = pos + total
        if total < BATCH_ENTRY_FIXED_SIZE or end > size or body_len < 0 or BATCH_ENTRY_FIXED_SIZE + body_len > total:
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
