"""SubscriptionData: what a consumer group reads from a topic (RocketMQ's SubscriptionData),
as heartbeats and pulls carry it and as broker and client keep it.

A TAG subscription is ``*`` (everything) or ``tagA || tagB`` with the tags' Java hash codes,
which the broker compares with the tags code of each ConsumeQueue entry; a SQL92 subscription
keeps its expression. :func:`lakemq.filter.parse_subscription` builds one from an expression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["SUB_ALL", "ExpressionType", "SubscriptionData"]

SUB_ALL: Final = "*"


class ExpressionType:
    TAG: Final = "TAG"
    SQL92: Final = "SQL92"


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0  # when the consumer subscribed, epoch ms: a newer version wins
    expression_type: str = ExpressionType.TAG
    class_filter_mode: bool = False

    @property
    def sub_all(self) -> bool:
        """A TAG subscription to every message of the topic."""
        return self.expression_type == ExpressionType.TAG and (self.sub_string == SUB_ALL or not self.tags_set)

    def to_json(self) -> dict[str, Any]:
        """The object heartbeats carry (RocketMQ's field names)."""
        return {"classFilterMode": self.class_filter_mode, "codeSet": sorted(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": sorted(self.tags_set), "topic": self.topic}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionData:
        return cls(str(data["topic"]), str(data.get("subString") or SUB_ALL),
                   frozenset(str(t) for t in data.get("tagsSet") or ()),
                   frozenset(int(c) for c in data.get("codeSet") or ()),
                   int(data.get("subVersion") or 0), str(data.get("expressionType") or ExpressionType.TAG),
                   bool(data.get("classFilterMode", False)))
