"""Subscriptions and the client-side tag re-check.

A TAG expression is ``*`` or ``tagA || tagB``. The broker filters by the tag hash code stored
in the ConsumeQueue, and hash codes collide, so the client checks the tag string again and
drops what does not match. SQL92 expressions (``MessageSelector.by_sql("a > 5")``) are
evaluated by the broker; the client compiles them first so a bad one fails at subscribe time,
before anything is sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from lakemq.common.message import MessageExt, tags_hash_code
from lakemq.filter import compile_sql92

__all__ = [
    "SUB_ALL", "ExpressionType", "MessageSelector", "SubscriptionData", "build_subscription", "tag_matches",
]

SUB_ALL: Final = "*"


class ExpressionType:
    TAG: Final = "TAG"
    SQL92: Final = "SQL92"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """What to consume from a topic (RocketMQ's MessageSelector): ``by_tag("tagA || tagB")``
    or ``by_sql("region = 'eu' AND price > 100")`` over message properties."""

    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        return cls(ExpressionType.SQL92, sql)

    @classmethod
    def by_tag(cls, tag: str | None) -> MessageSelector:
        return cls(ExpressionType.TAG, tag or SUB_ALL)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    expression_type: str = ExpressionType.TAG
    sub_version: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def sub_all(self) -> bool:
        return self.expression_type == ExpressionType.TAG and self.sub_string == SUB_ALL

    def to_json(self) -> dict[str, Any]:
        """The HeartbeatData subscription object (RocketMQ field names)."""
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": sorted(self.tags_set),
            "codeSet": sorted(self.code_set),
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }


def build_subscription(topic: str, expression: str | MessageSelector | None,
                       expression_type: str = ExpressionType.TAG) -> SubscriptionData:
    """Parse ``expression`` (None, "" and "*" mean everything); a selector brings its own
    type. A SQL92 expression that does not compile raises FilterExpressionError."""
    if isinstance(expression, MessageSelector):
        expression_type = expression.expression_type
        expression = expression.expression
    if expression_type not in (ExpressionType.TAG, ExpressionType.SQL92):
        raise ValueError(f"unknown expression type {expression_type!r}")
    if expression_type == ExpressionType.SQL92:
        if not expression or not expression.strip():
            raise ValueError("a SQL92 subscription needs an expression")
        compile_sql92(expression.strip())
        return SubscriptionData(topic, expression.strip(), expression_type=ExpressionType.SQL92)
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL)
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise ValueError(f"tag expression {expression!r} names no tag")
    return SubscriptionData(topic, text, tags, frozenset(tags_hash_code(t) for t in tags))


def tag_matches(subscription: SubscriptionData, msg: MessageExt) -> bool:
    """The client's exact re-check; broker-side SQL92 results are trusted."""
    if subscription.expression_type != ExpressionType.TAG or subscription.sub_all:
        return True
    return msg.tags is not None and msg.tags in subscription.tags_set
