"""What a pop asks and answers (the types both protocol faces use)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakemq.broker.pop.receipt import ReceiptHandle, is_pop_retry_topic
from lakemq.common.message import MessageConst, MessageExt
from lakemq.store.filter import MessageFilter

__all__ = ["PopRequest", "PopResult", "PoppedMessage", "origin_topic"]


@dataclass(frozen=True, slots=True)
class PopRequest:
    group: str
    topic: str
    max_messages: int
    invisible_ms: int
    queue_id: int | None = None  # None: every readable queue of the topic
    message_filter: MessageFilter | None = None
    poll_ms: int = 0  # long polling: how long to wait when nothing is there
    fifo: bool = False
    init_from_min: bool = False  # a group's first pop of a queue starts at its first message, else its end


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    record: bytes  # the CommitLog record as stored (the body of a remoting pop response)
    message: MessageExt
    handle: ReceiptHandle
    attempt: int  # delivery attempt, 1 for the first

    @property
    def topic(self) -> str:
        """The topic the consumer reads (a pop retry copy's RETRY_TOPIC)."""
        return origin_topic(self.message.topic, self.message)


@dataclass(slots=True)
class PopResult:
    pop_time: int
    invisible_ms: int
    messages: list[PoppedMessage] = field(default_factory=list)
    rest: int = 0  # messages left in the queues read


def origin_topic(topic: str, msg: MessageExt) -> str:
    """The topic a consumer reads, given the one a message was popped from."""
    return msg.properties.get(MessageConst.RETRY_TOPIC, topic) if is_pop_retry_topic(topic) else topic
