"""The tag filter the broker hands the store (RocketMQ's ExpressionMessageFilter for TAG
expressions), and subscriptions as the broker takes them from heartbeats.

A subscription ``tagA || tagB`` keeps the tags and their Java hash codes; the store compares
those codes with the tags code of each ConsumeQueue entry, so unmatched messages are skipped
without reading the CommitLog. Hash collisions pass here; the client re-checks the tag string.
A SQL92 subscription is compiled when it arrives (heartbeat or pull), so a bad expression is
refused then with SUBSCRIPTION_PARSE_FAILED; its filter is :class:`lakemq.filter.Sql92MessageFilter`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lakemq.common.codes import ResponseCode
from lakemq.common.subscription import ExpressionType, SubscriptionData
from lakemq.errors import for_code
from lakemq.filter import Sql92MessageFilter, parse_subscription
from lakemq.store.filter import MessageFilter

__all__ = ["TagMessageFilter", "check_expression_type", "from_heartbeat", "message_filter_for"]


def from_heartbeat(sub: SubscriptionData) -> SubscriptionData:
    """A heartbeat's subscription; tags and codes are re-derived from ``subString`` so the
    codes always match the broker's own hashing (FilterExpressionError if it does not parse)."""
    parsed = parse_subscription(sub.topic, sub.sub_string, sub.expression_type, sub_version=sub.sub_version)
    return dataclasses.replace(parsed, class_filter_mode=True) if sub.class_filter_mode else parsed


@dataclass(frozen=True, slots=True)
class TagMessageFilter:
    """The store's MessageFilter for a TAG subscription (None subscription: everything)."""

    subscription: SubscriptionData | None

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        sub = self.subscription
        if sub is None or sub.class_filter_mode or sub.expression_type != ExpressionType.TAG:
            return True
        if tags_code is None or sub.sub_all:
            return True
        return tags_code in sub.code_set

    def is_matched_by_commit_log(
        self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None
    ) -> bool:
        return True

    def code_set(self) -> frozenset[int] | None:
        """lakemq.store.filter.CodeSetFilter: what is_matched_by_consume_queue accepts."""
        sub = self.subscription
        if sub is None or sub.class_filter_mode or sub.expression_type != ExpressionType.TAG or sub.sub_all:
            return None
        return sub.code_set


def message_filter_for(subscription: SubscriptionData) -> MessageFilter:
    """The store filter of a checked subscription (its SQL92 text compiled, from the cache)."""
    if subscription.expression_type == ExpressionType.SQL92 and not subscription.class_filter_mode:
        from lakemq.filter.sql92 import compile_sql92  # sqlglot loads with the first SQL92 subscription

        return Sql92MessageFilter(compile_sql92(subscription.sub_string))
    return TagMessageFilter(subscription)


def check_expression_type(subscription: SubscriptionData, enable_property_filter: bool) -> None:
    """SQL92 subscriptions only where ``enablePropertyFilter`` allows them (BrokerError)."""
    if subscription.expression_type != ExpressionType.TAG and not enable_property_filter:
        raise for_code(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {subscription.expression_type}",
        )
