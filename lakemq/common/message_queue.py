"""MessageQueue: one queue of a topic on one broker, the unit of routing and allocation."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["MessageQueue"]


class MessageQueue(NamedTuple):
    """Ordered like RocketMQ's MessageQueue.compareTo: topic, then broker name, then queue id."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        """The camelCase object RocketMQ puts in LOCK_BATCH_MQ and other JSON bodies."""
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"
