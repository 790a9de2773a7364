"""What the store's read side returns: pulls (GetMessageResult) and key queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

__all__ = ["GetMessageResult", "GetMessageStatus", "QueryMessageResult"]


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries were read, none passed the filter
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # the entry's CommitLog file is gone
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # the ConsumeQueue file holding the offset is gone
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # offset > max offset
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max offset: nothing new yet
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # offset < min offset (expired)
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such topic/queue in this store
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue exists but is empty


@dataclass(slots=True)
class GetMessageResult:
    """``buffers`` are raw CommitLog records, the body of a pull response as they are."""

    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    buffers: list[bytes] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    buffer_total_size: int = 0

    @property
    def msg_count(self) -> int:
        return len(self.buffers)

    def add(self, record: bytes) -> None:
        self.buffers.append(record)
        self.buffer_total_size += len(record)


@dataclass(slots=True)
class QueryMessageResult:
    """Raw records found through the IndexFile, newest first."""

    messages: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0

    @property
    def buffer_total_size(self) -> int:
        return sum(len(m) for m in self.messages)
