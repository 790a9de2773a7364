"""Between RocketMQ 5's ``apache.rocketmq.v2.Message`` and lakemq's 4.x message model.

A sent message becomes what a 4.x producer would have sent for it, as RocketMQ's proxy maps it:
the client-made message id is the ``UNIQ_KEY`` property, tag and keys are ``TAGS`` and
``KEYS``, a message group is the ``SHARDING_KEY`` (its queue chosen by the group's hash), a
delivery timestamp is ``TIMER_DELIVER_MS`` (epoch ms), a transactional message is a prepared
half (``TRAN_MSG=true``, its producer group the topic, as the proxy registers 5.x producers),
an orphaned-transaction recovery duration is ``CHECK_IMMUNITY_TIME_IN_SECONDS``. A GZIP body is
stored decompressed, so 4.x consumers read it as sent. User properties may not use a 4.x system
property's name nor the separators of the property text.

A stored message becomes a v2 Message the same way back, with the CRC32 body digest the
clients verify; a body stored zlib-compressed (COMPRESSED_FLAG) goes out as GZIP encoding,
which the clients inflate.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.timestamp_pb2 import Timestamp

from lakemq.common.message import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    properties_to_string,
    tags_hash_code,
)
from lakemq.grpc._pb.definition_pb2 import (
    Code,
    Digest,
    DigestType,
    Encoding,
    Message,
    MessageType,
    Resource,
    SystemProperties,
)
from lakemq.remoting.headers import SendMessageRequestHeader

__all__ = ["SendRefused", "SendSpec", "decode_transaction_id", "encode_transaction_id", "enum_name", "host_of_peer",
           "millis", "send_header", "v2_message"]

# 5.x delivery_timestamp is what lakemq's timer reads as RocketMQ's PROPERTY_TIMER_DELIVER_MS.
TIMER_DELIVER_MS: Final = MessageConst.TIMER_DELIVER_MS
TRACE_CONTEXT: Final = "TRACE_CONTEXT"
# The properties a 5.x client may not set as user properties: the 4.x system ones.
_RESERVED: Final = frozenset(
    value for name, value in vars(MessageConst).items() if name.isupper() and isinstance(value, str)
) | {TRACE_CONTEXT, "CLUSTER"}
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_DURATION_MAX_S: Final = 315_576_000_000  # protobuf's Duration range: 10,000 years


class SendRefused(Exception):
    """A message refused before it reaches the broker core: its v2 code and why."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class SendSpec:
    """The 4.x send a v2 message is, and what the reply names."""

    header: SendMessageRequestHeader
    body: bytes
    message_id: str
    transactional: bool


def enum_name(enum: EnumTypeWrapper, value: int) -> str:
    """A v2 enum value's name; the number for one the definition does not know (proto3 keeps
    a peer's unknown enum values, and ``Name`` raises on them)."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def millis(value: Timestamp | Duration) -> int | None:
    """A Timestamp or Duration in ms; None when it is not a valid one (nanos outside
    [0, 1e9), a time outside years 1-9999, a duration over 10,000 years), which protobuf's
    ToMilliseconds refuses with ValueError."""
    if isinstance(value, Duration):  # Duration.ToMilliseconds checks nothing: its rules, by hand
        seconds, nanos = value.seconds, value.nanos
        if abs(seconds) > _DURATION_MAX_S or abs(nanos) >= 1_000_000_000 or seconds * nanos < 0:
            return None
    try:
        return int(value.ToMilliseconds())
    except ValueError:
        return None


def java_hash_queue(key: str, queues: int) -> int:
    """RocketMQ's SelectMessageQueueByHash: |String.hashCode()| mod the write queues."""
    return abs(tags_hash_code(key)) % queues


def host_of_peer(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` (grpc's peer) as ``127.0.0.1:5000``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        host, _, port = rest.rpartition(":")
        return f"{host.strip('[]')}:{port}"
    return rest if kind == "ipv4" else peer


def _body(msg: Message, max_body: int) -> bytes:
    body = msg.body
    if not body:
        raise SendRefused(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    encoding = msg.system_properties.body_encoding
    if encoding == Encoding.GZIP:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        try:
            body = inflater.decompress(body, max_body + 1)
        except zlib.error as exc:
            raise SendRefused(Code.MESSAGE_CORRUPTED, f"the GZIP body does not inflate: {exc}") from exc
        if not inflater.eof and len(body) <= max_body:
            raise SendRefused(Code.MESSAGE_CORRUPTED, "the GZIP body is truncated")
    elif encoding not in (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED):
        raise SendRefused(Code.BAD_REQUEST, f"body encoding {encoding} is not IDENTITY or GZIP")
    if len(body) > max_body:
        raise SendRefused(Code.MESSAGE_BODY_TOO_LARGE,
                          f"the message body of {len(body)} bytes exceeds max_body_size {max_body}")
    return body


def _check_text(what: str, text: str) -> None:
    if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
        raise SendRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"{what} {text!r} holds a control character "
                          "that separates RocketMQ's properties")


def _properties(msg: Message) -> dict[str, str]:
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if not key or key in _RESERVED:
            raise SendRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key!r} is a system property")
        _check_text("user property", key)
        _check_text(f"the value of user property {key}", value)
        props[key] = value
    sp = msg.system_properties
    if sp.tag:
        _check_text("tag", sp.tag)
        if "|" in sp.tag:
            raise SendRefused(Code.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} may not hold '|'")
        props[MessageConst.TAGS] = sp.tag
    if sp.keys:
        for key in sp.keys:
            _check_text("key", key)
        props[MessageConst.KEYS] = KEY_SEPARATOR.join(sp.keys)
    if sp.trace_context:
        _check_text("trace context", sp.trace_context)
        props[TRACE_CONTEXT] = sp.trace_context
    return props


def send_header(msg: Message, *, max_body: int, write_queues: int) -> SendSpec:
    """The 4.x send for ``msg`` (raises SendRefused); ``write_queues``: the topic's, for a
    message group's queue (0 when the topic is unknown: the core refuses it)."""
    sp = msg.system_properties
    topic = msg.topic.name
    if not sp.message_id:
        raise SendRefused(Code.ILLEGAL_MESSAGE_ID, "the message has no message_id")
    _check_text("message id", sp.message_id)
    body = _body(msg, max_body)
    props = _properties(msg)
    props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    kind = sp.message_type
    has_group, has_time = bool(sp.message_group), sp.HasField("delivery_timestamp")
    if (kind == MessageType.FIFO) != has_group or (kind == MessageType.DELAY) != has_time:
        raise SendRefused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          f"message type {enum_name(MessageType, kind)} does not match its message_group / "
                          "delivery_timestamp")
    if kind not in (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION):
        raise SendRefused(Code.NOT_IMPLEMENTED, f"message type {enum_name(MessageType, kind)} is not served by lakemq")
    queue_id = -1
    sys_flag = 0
    if has_group:
        _check_text("message group", sp.message_group)
        props[MessageConst.SHARDING_KEY] = sp.message_group
        if write_queues > 0:
            queue_id = java_hash_queue(sp.message_group, write_queues)
    if has_time:
        deliver_ms = millis(sp.delivery_timestamp)
        if deliver_ms is None:
            raise SendRefused(Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp is not a valid timestamp")
        props[TIMER_DELIVER_MS] = str(deliver_ms)
    transactional = kind == MessageType.TRANSACTION
    if transactional:
        props[MessageConst.TRANSACTION_PREPARED] = "true"
        props[MessageConst.PRODUCER_GROUP] = topic
        sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if seconds > 0:
                props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    born = millis(sp.born_timestamp) if sp.HasField("born_timestamp") else int(time.time() * 1000)
    if born is None:
        raise SendRefused(Code.BAD_REQUEST, "born_timestamp is not a valid timestamp")
    header = SendMessageRequestHeader(
        producer_group=topic if transactional else "",
        topic=topic,
        default_topic="",
        default_topic_queue_nums=0,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=born,
        flag=0,
        properties=properties_to_string(props),
    )
    return SendSpec(header, body, sp.message_id, transactional)


def encode_transaction_id(commit_log_offset: int, tran_state_table_offset: int) -> str:
    """A v2 transaction id naming a half message copy by its offsets (what END_TRANSACTION
    needs), so it holds across broker restarts without a table."""
    return f"{commit_log_offset:016X}{tran_state_table_offset:016X}"


def decode_transaction_id(transaction_id: str) -> tuple[int, int] | None:
    """(commitLogOffset, tranStateTableOffset), or None for an id lakemq did not make."""
    # Hex digits only: int() would also take a sign, spaces and underscores ("-000...1").
    if len(transaction_id) != 32 or not all(c in _HEX_DIGITS for c in transaction_id):
        return None
    return int(transaction_id[:16], 16), int(transaction_id[16:], 16)


def v2_message(msg: MessageExt, *, message_type: MessageType | None = None) -> Message:
    """A stored message as the 5.x clients receive it (no receipt handle: the caller's)."""
    props = msg.properties
    sp = SystemProperties(
        message_id=props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id,
        body_digest=Digest(type=DigestType.CRC32, checksum=format(zlib.crc32(msg.body) & 0xFFFFFFFF, "08X")),
        body_encoding=Encoding.GZIP if msg.sys_flag & MessageSysFlag.COMPRESSED_FLAG else Encoding.IDENTITY,
        born_host=msg.born_host.rpartition(":")[0],
        store_host=msg.store_host,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        delivery_attempt=msg.reconsume_times + 1,
    )
    if msg.tags:
        sp.tag = msg.tags
    sp.keys.extend(msg.keys)
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    group = props.get(MessageConst.SHARDING_KEY)
    if group:
        sp.message_group = group
    deliver = props.get(TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if message_type is None:
        if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            message_type = MessageType.TRANSACTION
        elif group:
            message_type = MessageType.FIFO
        elif deliver:
            message_type = MessageType.DELAY
        else:
            message_type = MessageType.NORMAL
    sp.message_type = message_type
    user = {k: v for k, v in props.items() if k not in _RESERVED}
    return Message(topic=Resource(name=msg.topic), user_properties=user, system_properties=sp, body=msg.body)
