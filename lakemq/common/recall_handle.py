"""RocketMQ 5's recall handle: what a send of a timer message answers, and what RECALL_MESSAGE
(or gRPC's RecallMessage) takes back to cancel it.

Version 1 is ``v1 <topic> <broker name> <timestamp> <message id>`` joined by spaces, in
URL-safe base64 (RocketMQ's RecallMessageHandle.HandleV1); the timestamp is the due time + 1
and the message id the UNIQ_KEY.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final

__all__ = ["RecallHandle"]

_VERSION_1: Final = "v1"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: int  # the due time + 1, as RocketMQ writes it
    message_id: str  # the UNIQ_KEY

    @classmethod
    def for_due(cls, topic: str, broker_name: str, due_ms: int, message_id: str) -> RecallHandle:
        return cls(topic, broker_name, due_ms + 1, message_id)

    @property
    def due_ms(self) -> int:
        return self.timestamp - 1

    def encode(self) -> str:
        raw = " ".join((_VERSION_1, self.topic, self.broker_name, str(self.timestamp), self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        """ValueError, with RocketMQ's words, for anything that is not a v1 handle."""
        try:
            raw = base64.urlsafe_b64decode(handle.encode()).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise ValueError("recall handle is invalid") from exc
        items = raw.split(" ")
        if len(items) < 5 or items[0] != _VERSION_1:
            raise ValueError("recall handle is invalid")
        try:
            timestamp = int(items[3])
        except ValueError as exc:
            raise ValueError("recall handle is invalid") from exc
        return cls(items[1], items[2], timestamp, items[4])
