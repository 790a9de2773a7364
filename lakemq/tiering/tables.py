"""The lake's tables: names, the ``messages`` schema, and what tiering writes in commit info.

One physical Delta table, ``messages``, partitioned by ``topic`` and ``store_date`` (UTC),
holds every CommitLog record; ``kind`` keeps RocketMQ's system records apart from user
topics (SQL views select by it), and one Delta commit per sealed segment range covers all
kinds at once, so exactly-once needs a single app transaction. Timestamps stay RocketMQ's
epoch milliseconds; ``body`` is the stored body (compressed when ``sys_flag`` says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from lakemq.common.message import properties_to_string
from lakemq.common.record import encode_host, encode_record

__all__ = [
    "DATA_SCHEMA",
    "KEYS_DATA_SCHEMA",
    "KEYS_PARTITION_COLUMNS",
    "KEYS_SCHEMA",
    "KEYS_TABLE",
    "KEY_TYPE_KEY",
    "KEY_TYPE_UNIQ",
    "KIND_NORMAL",
    "KIND_SCHEDULE",
    "KIND_TRANS_HALF",
    "KIND_TRANS_OP",
    "KIND_WHEEL_TIMER",
    "LAKE_MESSAGE_COLUMNS",
    "MESSAGES_SCHEMA",
    "MESSAGES_TABLE",
    "META_BROKER",
    "META_DIGEST",
    "META_QUEUE_ENDS",
    "META_RANGE_END",
    "META_RANGE_START",
    "META_ROWS",
    "META_SEGMENT",
    "META_STORE_HOSTS",
    "PARTITION_COLUMNS",
    "SPARK_ARROW_SCHEMA",
    "SPARK_DDL",
    "SYSTEM_TOPIC_KINDS",
    "LakeMessage",
    "encode_row",
    "escape_partition_value",
]

MESSAGES_TABLE: Final = "messages"
PARTITION_COLUMNS: Final = ("topic", "store_date")

KIND_NORMAL: Final = "normal"
KIND_SCHEDULE: Final = "schedule"
KIND_TRANS_HALF: Final = "trans_half"
KIND_TRANS_OP: Final = "trans_op"
KIND_WHEEL_TIMER: Final = "wheel_timer"  # timer messages waiting, and recall markers
SYSTEM_TOPIC_KINDS: Final = {
    "SCHEDULE_TOPIC_XXXX": KIND_SCHEDULE,
    "RMQ_SYS_TRANS_HALF_TOPIC": KIND_TRANS_HALF,
    "RMQ_SYS_TRANS_OP_HALF_TOPIC": KIND_TRANS_OP,
    "rmq_sys_wheel_timer": KIND_WHEEL_TIMER,
}

MESSAGES_SCHEMA: Final = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("commitlog_offset", pa.int64(), nullable=False),
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("uniq_key", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary()),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("sys_flag", pa.int32(), nullable=False),
    pa.field("born_timestamp", pa.int64(), nullable=False),
    pa.field("born_host", pa.string(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
    pa.field("store_host", pa.string(), nullable=False),
    pa.field("reconsume_times", pa.int32(), nullable=False),
    pa.field("prepared_transaction_offset", pa.int64(), nullable=False),
    pa.field("body_crc", pa.int32(), nullable=False),
    pa.field("store_date", pa.date32(), nullable=False),
])

# Data files leave the partition columns out, as Delta expects; readers add them back.
DATA_SCHEMA: Final = pa.schema([f for f in MESSAGES_SCHEMA if f.name not in PARTITION_COLUMNS])

# ``message_keys``: the lake's IndexFile. One row per key of a message (each of its KEYS, and
# its UNIQ_KEY), sorted by key inside each file, so a look-up by key reads a few pages instead
# of the whole ``keys`` column, then fetches its rows from ``messages`` by offset.
KEYS_TABLE: Final = "message_keys"
KEYS_PARTITION_COLUMNS: Final = ("topic",)
KEY_TYPE_KEY: Final = "key"
KEY_TYPE_UNIQ: Final = "uniq"
KEYS_SCHEMA: Final = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("key", pa.string(), nullable=False),
    pa.field("key_type", pa.string(), nullable=False),
    pa.field("store_host", pa.string(), nullable=False),
    pa.field("commitlog_offset", pa.int64(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
])
KEYS_DATA_SCHEMA: Final = pa.schema([f for f in KEYS_SCHEMA if f.name not in KEYS_PARTITION_COLUMNS])

# What Spark expects back from a source declared by a DDL string: every field nullable.
SPARK_ARROW_SCHEMA: Final = pa.schema([f.with_nullable(True) for f in MESSAGES_SCHEMA])

_SPARK_TYPES: Final = {
    pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.binary(): "binary",
    pa.date32(): "date", pa.map_(pa.string(), pa.string()): "map<string,string>",
}
SPARK_DDL: Final = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in MESSAGES_SCHEMA)

# The columns a look-up reads for a LakeMessage (the topic comes from the partition).
LAKE_MESSAGE_COLUMNS: Final = (
    "queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key", "tags", "keys", "properties", "body",
    "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
)


@dataclass(frozen=True, slots=True)
class LakeMessage:
    """One message as a look-up in the lake returns it (the body as stored)."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    uniq_key: str | None
    tags: str | None
    keys: tuple[str, ...]
    properties: dict[str, str]
    body: bytes
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int

    @classmethod
    def from_row(cls, topic: str, row: Mapping[str, Any]) -> LakeMessage:
        """From a row of LAKE_MESSAGE_COLUMNS, as Spark (a dict) or pyarrow (the map as
        key-value pairs) gives it."""
        return cls(
            topic, row["queue_id"], row["queue_offset"], row["commitlog_offset"], row["msg_id"], row["uniq_key"],
            row["tags"], tuple((row["keys"] or "").split()), dict(row["properties"] or ()),
            bytes(row["body"] or b""), row["sys_flag"], row["born_timestamp"], row["born_host"],
            row["store_timestamp"], row["store_host"], row["reconsume_times"],
        )


_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def escape_partition_value(value: str) -> str:
    """A partition value as a Hive-style directory name holds it: characters outside
    [A-Za-z0-9_.-] become %XX."""
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in value)


# Commit info keys tiering writes with every segment commit (custom metadata).
META_BROKER: Final = "lakemq.broker"
META_RANGE_START: Final = "lakemq.rangeStart"
META_RANGE_END: Final = "lakemq.rangeEnd"
META_ROWS: Final = "lakemq.rows"
META_DIGEST: Final = "lakemq.digest"
META_SEGMENT: Final = "lakemq.segment"
# JSON {topic: {queue id: next queue offset}} of the range's records (lakemq.tiering.seal).
META_QUEUE_ENDS: Final = "lakemq.queueEnds"
# JSON list of the range's distinct ``store_host`` values: which rows are the broker's (its
# queue and CommitLog offsets are not unique across brokers). Older commits lack it.
META_STORE_HOSTS: Final = "lakemq.storeHosts"


def encode_row(topic: bytes, row: Mapping[str, Any], properties: dict[str, str], store_host: str) -> bytes:
    """A ``messages`` row as the CommitLog record it was: offsets, times, flags and the stored
    body and CRC kept. ``properties`` is the row's map as a dict; the lake does not keep their
    order, so the record may lay them out differently from the original."""
    return bytes(encode_record(
        topic=topic,
        queue_id=row["queue_id"],
        body=bytes(row["body"] or b""),
        flag=row["flag"],
        properties=properties_to_string(properties).encode(),
        sys_flag=row["sys_flag"],
        born_timestamp=row["born_timestamp"],
        born_host=encode_host(row["born_host"]),
        store_host=encode_host(store_host),
        reconsume_times=row["reconsume_times"],
        prepared_transaction_offset=row["prepared_transaction_offset"],
        queue_offset=row["queue_offset"],
        physical_offset=row["commitlog_offset"],
        store_timestamp=row["store_timestamp"],
        crc=row["body_crc"],
    ))
