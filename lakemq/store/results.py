"""Outcomes of a put: what the CommitLog appended and what the store tells the broker."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = ["AppendMessageResult", "AppendMessageStatus", "PutMessageResult", "PutMessageStatus"]


class PutMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but not on disk within syncFlushTimeout
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # store shut down or not writeable
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # body too big, bad topic, unknown sys flag bits
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"  # the append lock was held too long: flow control
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class AppendMessageStatus(Enum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"  # the file was sealed with a blank record; retry in the next
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class AppendMessageResult(NamedTuple):
    """Where a put landed (a NamedTuple: built once per put, on the hot path). For a batch:
    the first record's offset and queue offset, the bytes and the count of the whole batch,
    the message ids joined by ``,`` (RocketMQ's form), and the members' body bytes in total
    (the send metrics)."""

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_id: str = ""
    store_timestamp: int = 0
    logics_offset: int = 0
    msg_num: int = 1
    body_bytes: int = 0

    @property
    def is_ok(self) -> bool:
        return self.status is AppendMessageStatus.PUT_OK

    @property
    def next_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


class PutMessageResult(NamedTuple):
    """What :meth:`MessageStore.put` answers. ``is_ok`` follows RocketMQ: true when the append
    succeeded, even if the flush then timed out (the message is stored; ``status`` tells the
    broker which response code to send).

    ``pending``: the put was appended and waits for its acknowledgement, which the ack sink
    given to the put receives later (lakemq.store.acks); ``status`` is PUT_OK until then, and
    :meth:`acknowledged` gives the final result."""

    status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    remark: str = ""
    pending: bool = False

    def acknowledged(self, status: PutMessageStatus) -> PutMessageResult:
        """This put's result once its acknowledgement ``status`` came."""
        return PutMessageResult(status, self.append_result, self.remark)

    @property
    def is_ok(self) -> bool:
        # An append result exists only for records that were appended (CommitLog._append_records).
        return self.append_result is not None
