"""The body of SEND_BATCH_MESSAGE (RocketMQ's MessageDecoder.encodeMessages).

Messages are concatenated, each as::

    | TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0) | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES |

TOTALSIZE = 22 + len(body) + len(properties). The broker fills magic and CRC when it stores
each message; the topic is the batch's.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from lakemq.common.message import Message, properties_to_string, string_to_properties
from lakemq.errors import MessageIllegalError

__all__ = ["BATCH_ENTRY_FIXED_SIZE", "decode_messages", "encode_messages"]

_HEAD = struct.Struct(">iiiii")
_PROPS = struct.Struct(">h")
BATCH_ENTRY_FIXED_SIZE = _HEAD.size + _PROPS.size  # 22


def _encode_one(msg: Message) -> bytes:
    props = properties_to_string(msg.properties).encode("utf-8")
    if len(props) > 0x7FFF:
        raise MessageIllegalError(f"properties of {len(props)} bytes exceed 32767")
    size = BATCH_ENTRY_FIXED_SIZE + len(msg.body) + len(props)
    return b"".join((_HEAD.pack(size, 0, 0, msg.flag, len(msg.body)), msg.body, _PROPS.pack(len(props)), props))


def encode_messages(messages: Iterable[Message]) -> bytes:
    return b"".join(_encode_one(m) for m in messages)


def decode_messages(topic: str, data: bytes) -> Iterator[Message]:
    """The inverse, for checking what we send; raises MessageIllegalError on bad framing."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < BATCH_ENTRY_FIXED_SIZE:
            raise MessageIllegalError(f"truncated batch entry at {pos}")
        size, _magic, _crc, flag, body_len = _HEAD.unpack_from(data, pos)
        if size < BATCH_ENTRY_FIXED_SIZE or pos + size > len(data) or body_len < 0 or body_len > size - BATCH_ENTRY_FIXED_SIZE:
            raise MessageIllegalError(f"bad batch entry size at {pos}")
        body_at = pos + _HEAD.size
        body = data[body_at : body_at + body_len]
        (props_len,) = _PROPS.unpack_from(data, body_at + body_len)
        props_at = body_at + body_len + 2
        if props_len < 0 or props_at + props_len != pos + size:
            raise MessageIllegalError(f"batch entry at {pos}: lengths do not add up")
        props = string_to_properties(data[props_at : props_at + props_len].decode("utf-8"))
        yield Message(topic, bytes(body), flag, props)
        pos += size
