"""What the store's read side returns: pulls (GetMessageResult) and key queries."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["GetMessageResult", "GetMessageStatus", "QueryMessageResult"]

_TOTAL_SIZE = struct.Struct(">i")  # a record's TOTALSIZE, its first field (lakemq.common.record)


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
    """The records found, raw as the CommitLog holds them (the body of a pull response): added
    one by one (:meth:`add`), or read in one piece (the compiled read, :meth:`set_body`).
    :attr:`buffers` gives them one by one and :meth:`joined` in one buffer, either way."""

    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    suggest_pulling_from_slave: bool = False
    buffer_total_size: int = 0
    added: list[bytes] = field(default_factory=list)
    body: bytes = b""
    body_count: int = 0

    @property
    def msg_count(self) -> int:
        return len(self.added) + self.body_count

    @property
    def buffers(self) -> list[bytes]:
        """Every record found, one buffer each."""
        if not self.body_count:
            return self.added
        body, out, pos = self.body, [], 0
        while pos < len(body):
            size = _TOTAL_SIZE.unpack_from(body, pos)[0]
            out.append(body[pos:pos + size])
            pos += size
        return out

    def add(self, record: bytes) -> None:
        self.added.append(record)
        self.buffer_total_size += len(record)

    def set_body(self, body: bytes, count: int) -> None:
        """``count`` whole records read in one piece (in place of any added before)."""
        self.added = []
        self.body, self.body_count = body, count
        self.buffer_total_size = len(body)

    def joined(self) -> bytes:
        """Every record found, in one buffer."""
        return self.body if self.body_count else b"".join(self.added)


@dataclass(slots=True)
class QueryMessageResult:
    """Raw records found through the IndexFile, newest first."""

    messages: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phy_offset: int = 0
    # The index held at least as many matches as were asked (or the broker's maxMsgsNumBatch):
    # more may match than ``messages`` holds.
    index_cut: bool = False
    # IndexService.whole_from when the query ran: the index holds every keyed record from here.
    index_whole_from: int | None = None

    @property
    def buffer_total_size(self) -> int:
        return sum(len(m) for m in self.messages)
