"""Receipt handles: what a popped message is acked, hidden longer or dead-lettered by.

The text is RocketMQ 5's "extra info" (ExtraInfoUtil), fields joined by a space:
``ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset``.
``topicType`` is ``1`` when the message came from the group's pop retry topic
(``%RETRY%{group}_{topic}``, RocketMQ's KeyBuilder.buildPopRetryTopicV1) and ``0`` otherwise, so a
handle names the real queue given the group and the topic the consumer asked for.
``reviveQid`` 999 (RocketMQ's POP_ORDER_REVIVE_QUEUE) marks a FIFO delivery. 4.x/5.x remoting
clients build this text themselves from the POP_MESSAGE response header; the gRPC face hands it
out as the receipt handle.

A delivery is identified by its queue and offset plus ``popTime``: a change of invisible
duration or a FIFO redelivery gives the message a new pop time, so an older handle no longer
matches.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakemq.broker.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX
from lakemq.errors import ReceiptHandleError

__all__ = ["ORDER_REVIVE_QID", "ReceiptHandle", "is_pop_retry_topic", "pop_retry_topic"]

ORDER_REVIVE_QID = 999
_SEPARATOR = " "


def pop_retry_topic(group: str, topic: str) -> str:
    """Where a group's unacked POP deliveries of ``topic`` go to be delivered again."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def is_pop_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    ck_offset: int  # the first queue offset of the pop this delivery belongs to
    pop_time: int  # ms; with the queue and offset, identifies the delivery
    invisible_ms: int
    revive_qid: int
    retry: bool  # delivered from the pop retry topic
    broker_name: str
    queue_id: int
    offset: int

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    @property
    def fifo(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    def real_topic(self, group: str, topic: str) -> str:
        """The queue's topic, given the topic the consumer asked for (or the real one)."""
        if self.retry and not is_pop_retry_topic(topic):
            return pop_retry_topic(group, topic)
        return topic

    def encode(self) -> str:
        return _SEPARATOR.join(str(part) for part in (
            self.ck_offset, self.pop_time, self.invisible_ms, self.revive_qid, 1 if self.retry else 0,
            self.broker_name, self.queue_id, self.offset))

    @classmethod
    def parse(cls, text: str, offset: int | None = None) -> ReceiptHandle:
        """The handle in ``text``; ``offset`` is the message's queue offset when the text has
        only the seven fields of a batch's check point (the ack header carries it apart)."""
        parts = text.split(_SEPARATOR)
        try:
            if len(parts) == 7 and offset is not None:
                parts.append(str(offset))
            if len(parts) != 8:
                raise ValueError(f"{len(parts)} fields")
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4] == "1",
                       parts[5], int(parts[6]), int(parts[7]))
        except ValueError as exc:
            raise ReceiptHandleError(f"malformed receipt handle {text!r}: {exc}") from exc
