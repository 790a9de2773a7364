"""Subscriptions and the client-side tag re-check.

A TAG expression is ``*`` or ``tagA || tagB``. The broker filters by the tag hash code stored
in the ConsumeQueue, and hash codes collide, so the client checks the tag string again and
drops what does not match. SQL92 expressions (``MessageSelector.by_sql("a > 5")``) are
evaluated by the broker; the client parses them first (lakemq.filter.parse_subscription) so a
bad one fails at subscribe time, before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakemq.common.message import MessageExt
from lakemq.common.subscription import SUB_ALL, ExpressionType, SubscriptionData
from lakemq.filter import parse_subscription

__all__ = ["MessageSelector", "build_subscription", "tag_matches"]


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


def build_subscription(topic: str, expression: str | MessageSelector | None,
                       expression_type: str = ExpressionType.TAG) -> SubscriptionData:
    """Parse ``expression`` (None, "" and "*" mean everything); a selector brings its own
    type. FilterExpressionError for an expression that does not parse."""
    if isinstance(expression, MessageSelector):
        expression_type = expression.expression_type
        expression = expression.expression
    return parse_subscription(topic, expression, expression_type)


def tag_matches(subscription: SubscriptionData, msg: MessageExt) -> bool:
    """The client's exact re-check; broker-side SQL92 results are trusted."""
    if subscription.expression_type != ExpressionType.TAG or subscription.sub_all:
        return True
    return msg.tags is not None and msg.tags in subscription.tags_set
