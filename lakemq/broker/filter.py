"""Subscriptions and the tag filter the broker hands the store (RocketMQ FilterAPI and
ExpressionMessageFilter for TAG expressions).

A subscription ``tagA || tagB`` keeps the tags and their Java hash codes; the store compares
those codes with the tags code of each ConsumeQueue entry, so unmatched messages are skipped
without reading the CommitLog. Hash collisions pass here; the client re-checks the tag string.
A SQL92 subscription is compiled when it arrives (heartbeat or pull), so a bad expression is
refused then with SUBSCRIPTION_PARSE_FAILED; its filter is :class:`lakemq.filter.Sql92MessageFilter`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar, Final

from lakemq.common.codes import ResponseCode
from lakemq.common.message import tags_hash_code
from lakemq.errors import FilterExpressionError
from lakemq.filter import Sql92MessageFilter, compile_sql92
from lakemq.remoting import bodies
from lakemq.store.filter import MessageFilter

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "SUB_ALL",
    "SubscriptionData",
    "SubscriptionParseError",
    "TagMessageFilter",
    "build_subscription_data",
    "from_heartbeat",
    "message_filter_for",
]

SUB_ALL: Final = "*"
EXPRESSION_TYPE_TAG: Final = "TAG"
EXPRESSION_TYPE_SQL92: Final = "SQL92"


class SubscriptionParseError(ValueError):
    """A subscription the broker cannot use (SUBSCRIPTION_PARSE_FAILED)."""

    code: ClassVar[int] = ResponseCode.SUBSCRIPTION_PARSE_FAILED


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = field(default_factory=lambda: int(time.time() * 1000))
    expression_type: str = EXPRESSION_TYPE_TAG
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL or not self.tags_set


def build_subscription_data(
    topic: str, sub_string: str | None, expression_type: str = EXPRESSION_TYPE_TAG, *, sub_version: int = 0
) -> SubscriptionData:
    """Parse ``tagA || tagB`` (or ``*`` / empty for all messages)."""
    expression_type = expression_type or EXPRESSION_TYPE_TAG
    version = sub_version or int(time.time() * 1000)
    if expression_type != EXPRESSION_TYPE_TAG:
        if expression_type != EXPRESSION_TYPE_SQL92 or not sub_string:
            raise SubscriptionParseError(f"unknown expression type {expression_type!r}")
        try:
            compile_sql92(sub_string.strip())
        except FilterExpressionError as exc:
            raise SubscriptionParseError(str(exc)) from exc
        return SubscriptionData(
            topic, sub_string.strip(), sub_version=version, expression_type=expression_type
        )
    text = (sub_string or "").strip()
    if not text or text == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=version)
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise SubscriptionParseError(f"subscription {sub_string!r} names no tag")
    return SubscriptionData(topic, text, tags, frozenset(tags_hash_code(t) for t in tags), version)


def from_heartbeat(sub: bodies.SubscriptionData) -> SubscriptionData:
    """A heartbeat's subscription; tags and codes are re-derived from ``subString`` so the
    codes always match the broker's own hashing."""
    parsed = build_subscription_data(
        sub.topic, sub.sub_string, sub.expression_type, sub_version=sub.sub_version
    )
    if sub.class_filter_mode:
        return SubscriptionData(
            parsed.topic,
            parsed.sub_string,
            parsed.tags_set,
            parsed.code_set,
            parsed.sub_version,
            parsed.expression_type,
            True,
        )
    return parsed


@dataclass(frozen=True, slots=True)
class TagMessageFilter:
    """The store's MessageFilter for a TAG subscription (None subscription: everything)."""

    subscription: SubscriptionData | None

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        sub = self.subscription
        if sub is None or sub.class_filter_mode or sub.expression_type != EXPRESSION_TYPE_TAG:
            return True
        if tags_code is None or sub.matches_all:
            return True
        return tags_code in sub.code_set

    def is_matched_by_commit_log(
        self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None
    ) -> bool:
        return True


def message_filter_for(subscription: SubscriptionData) -> MessageFilter:
    """The store filter of a checked subscription (its SQL92 text compiled, from the cache)."""
    if subscription.expression_type == EXPRESSION_TYPE_SQL92 and not subscription.class_filter_mode:
        return Sql92MessageFilter(compile_sql92(subscription.sub_string))
    return TagMessageFilter(subscription)
