"""The message model shared by store, broker, client and jobs.

Names follow RocketMQ 4.x (``Message``, ``MessageExt``, ``MessageConst``, ``MessageSysFlag``);
the wire and on-disk spelling of every property key is RocketMQ's own, because official
clients read and write them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "KEY_SEPARATOR",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageExtBrokerInner",
    "MessageSysFlag",
    "properties_to_string",
    "string_to_properties",
    "tags_hash_code",
    "without_wait_true",
]

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
KEY_SEPARATOR: Final = " "


class MessageConst:
    """Property keys exactly as RocketMQ spells them on the wire."""

    KEYS: Final = "KEYS"
    TAGS: Final = "TAGS"
    WAIT_STORE_MSG_OK: Final = "WAIT"
    DELAY_TIME_LEVEL: Final = "DELAY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QUEUE_ID: Final = "REAL_QID"
    TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PRODUCER_GROUP: Final = "PGROUP"
    MIN_OFFSET: Final = "MIN_OFFSET"
    MAX_OFFSET: Final = "MAX_OFFSET"
    BUYER_ID: Final = "BUYER_ID"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG: Final = "TRANSFER_FLAG"
    CORRECTION_FLAG: Final = "CORRECTION_FLAG"
    MQ2_FLAG: Final = "MQ2_FLAG"
    RECONSUME_TIME: Final = "RECONSUME_TIME"
    MSG_REGION: Final = "MSG_REGION"
    TRACE_SWITCH: Final = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
    MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP: Final = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID: Final = "INSTANCE_ID"
    SHARDING_KEY: Final = "SHARDING_KEY"
    # request() / reply (RocketMQ 4.6+): set by the client, read by the broker's reply path.
    CORRELATION_ID: Final = "CORRELATION_ID"
    REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
    MESSAGE_TTL: Final = "TTL"
    MESSAGE_TYPE: Final = "MSG_TYPE"
    PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
    # Aliyun/ONS style absolute delivery time (epoch millis); the lake delay sweep honours it.
    START_DELIVER_TIME: Final = "__STARTDELIVERTIME"
    # Timer messages (RocketMQ 5's TimerMessageStore): the delivery time a producer asks for
    # (an epoch ms, or a delay from the store time), the due time the broker fixed
    # (TIMER_OUT_MS: its presence marks a message already timed), and a recall's marker.
    TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
    TIMER_OUT_MS: Final = "TIMER_OUT_MS"
    TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"


class MessageSysFlag:
    """Bits of the SYSFLAG field (RocketMQ 4.x MessageSysFlag)."""

    COMPRESSED_FLAG: Final = 0x1
    MULTI_TAGS_FLAG: Final = 0x2
    TRANSACTION_NOT_TYPE: Final = 0x0
    TRANSACTION_PREPARED_TYPE: Final = 0x4
    TRANSACTION_COMMIT_TYPE: Final = 0x8
    TRANSACTION_ROLLBACK_TYPE: Final = 0xC
    TRANSACTION_MASK: Final = 0xC  # the two bits of the transaction type
    BORNHOST_V6_FLAG: Final = 0x10
    STOREHOSTADDRESS_V6_FLAG: Final = 0x20
    # Bits 8-10 name the body's compression (RocketMQ 4.9.4+ clients): 0 (older clients) and 3
    # are zlib, 1 LZ4, 2 ZSTD (lakemq.common.compression); 4-7 are unknown and refused.
    COMPRESSION_TYPE_MASK: Final = 0x700
    COMPRESSION_ZLIB_TYPE: Final = 0x300
    # lakemq stores IPv4 hosts only; the v6 bits are refused so the fixed record layout holds.
    # A sys flag with bits outside this mask takes the store's checked path (unknown_bits).
    KNOWN_MASK: Final = COMPRESSED_FLAG | MULTI_TAGS_FLAG | TRANSACTION_MASK

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        return sys_flag & MessageSysFlag.TRANSACTION_MASK

    @staticmethod
    def reset_transaction_value(sys_flag: int, value: int) -> int:
        return (sys_flag & ~MessageSysFlag.TRANSACTION_MASK) | value

    @classmethod
    def unknown_bits(cls, sys_flag: int) -> int:
        """The bits lakemq does not store: unknown flags, and a compression type past ZLIB."""
        compression = sys_flag & cls.COMPRESSION_TYPE_MASK
        refused = sys_flag & ~(cls.KNOWN_MASK | cls.COMPRESSION_TYPE_MASK)
        return refused | (compression if compression > cls.COMPRESSION_ZLIB_TYPE else 0)


def properties_to_string(properties: dict[str, str]) -> str:
    """Serialize as RocketMQ does: ``name\\x01value\\x02`` for every pair."""
    if not properties:
        return ""
    try:  # the joins run in C; a value that is not text takes the formatting path
        return PROPERTY_SEPARATOR.join(map(NAME_VALUE_SEPARATOR.join, properties.items())) + PROPERTY_SEPARATOR
    except TypeError:
        return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items())


_WAIT_TRUE: Final = f"{MessageConst.WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}true{PROPERTY_SEPARATOR}"


def without_wait_true(text: str) -> str:
    """A send's property text without ``WAIT=true``, which RocketMQ's broker does not store
    (9 bytes a message; absent means true). ``WAIT=false`` is kept: it changes the put."""
    at = text.find(_WAIT_TRUE)
    while at > 0 and text[at - 1] != PROPERTY_SEPARATOR:  # inside another pair: look further
        at = text.find(_WAIT_TRUE, at + 1)
    return text if at < 0 else text[:at] + text[at + len(_WAIT_TRUE):]


def string_to_properties(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            result[name] = value
    return result


# A loop over UTF-16 code units costs microseconds per send; a topic's tags are few and repeat.
@functools.lru_cache(maxsize=4096)
def tags_hash_code(tags: str | None) -> int:
    """Java ``String.hashCode()`` of the tag, the tagsCode stored in ConsumeQueue entries."""
    if not tags:
        return 0
    units = tags.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@dataclass(slots=True)
class Message:
    """What a producer sends: topic, body, flag and properties (tags, keys, ...)."""

    topic: str
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(MessageConst.TAGS, value)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(MessageConst.KEYS, "")
        return [k for k in raw.split(KEY_SEPARATOR) if k]

    @keys.setter
    def keys(self, value: str | list[str] | None) -> None:
        if isinstance(value, list):
            value = KEY_SEPARATOR.join(value)
        self._set(MessageConst.KEYS, value)

    @property
    def delay_time_level(self) -> int:
        raw = self.properties.get(MessageConst.DELAY_TIME_LEVEL)
        return int(raw) if raw else 0

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self._set(MessageConst.DELAY_TIME_LEVEL, str(level) if level > 0 else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != "false"

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def _set(self, key: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(key, None)
        else:
            self.properties[key] = value


@dataclass(slots=True)
class MessageExt(Message):
    """A stored message: everything in a CommitLog record (see :mod:`lakemq.common.record`)."""

    queue_id: int = 0
    store_size: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_timestamp: int = 0
    store_host: str = "127.0.0.1:0"
    msg_id: str = ""
    commit_log_offset: int = 0
    body_crc: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def to_message(self) -> Message:
        return Message(self.topic, self.body, self.flag, dict(self.properties))

    def replace(self, **changes: object) -> MessageExt:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(slots=True)
class MessageExtBrokerInner(MessageExt):
    """What the broker hands the store to put: a MessageExt plus the ConsumeQueue tag hash and
    the properties as serialized on the wire. ``properties_string`` wins when set (the broker
    passes the client's bytes through); otherwise the store serializes ``properties``."""

    tags_code: int = 0
    properties_string: str = ""

    def encoded_properties(self) -> bytes:
        return (self.properties_string or properties_to_string(self.properties)).encode("utf-8")

    def set_property(self, key: str, value: str) -> None:
        """Set one property, keeping ``properties_string`` in step."""
        self.properties[key] = value
        self.properties_string = properties_to_string(self.properties)

    def clear_property(self, key: str) -> None:
        self.properties.pop(key, None)
        self.properties_string = properties_to_string(self.properties)
