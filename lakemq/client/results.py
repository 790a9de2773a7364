"""Values returned to users: send and pull results, listener statuses and contexts."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from lakemq.common.message import MessageExt
from lakemq.common.message_queue import MessageQueue

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
]


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    send_status: SendStatus
    msg_id: str  # UNIQ_KEY; comma-joined for a batch
    offset_msg_id: str  # store host + CommitLog offset
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = "DefaultRegion"
    recall_handle: str | None = None  # a timer message's: Producer.recall_message takes it


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(frozen=True, slots=True)
class PullResult:
    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msgs: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


class ConsumeConcurrentlyStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    message_queue: MessageQueue
    # 0: the broker picks (3 + reconsume times); -1: straight to the DLQ; > 0: this level.
    delay_level_when_next_consume: int = 0
    # Messages up to and including this index succeeded when RECONSUME_LATER is returned.
    ack_index: int = -1


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1
