"""Parsing a subscription expression, the same for broker and client (RocketMQ's FilterAPI)."""

from __future__ import annotations

import time

from lakemq.common.message import tags_hash_code
from lakemq.common.subscription import SUB_ALL, ExpressionType, SubscriptionData
from lakemq.errors import FilterExpressionError

__all__ = ["parse_subscription"]


def parse_subscription(topic: str, expression: str | None, expression_type: str | None = ExpressionType.TAG,
                       *, sub_version: int = 0) -> SubscriptionData:
    """``tagA || tagB`` (``*``, empty or None: every message) or a SQL92 expression, which
    must compile. ``sub_version`` 0 stamps the current time. FilterExpressionError
    (SUBSCRIPTION_PARSE_FAILED) for anything else."""
    expression_type = expression_type or ExpressionType.TAG
    version = sub_version or int(time.time() * 1000)
    if expression_type == ExpressionType.SQL92:
        if not expression or not expression.strip():
            raise FilterExpressionError("a SQL92 subscription needs an expression")
        from lakemq.filter.sql92 import compile_sql92  # sqlglot loads with the first SQL92 subscription

        compile_sql92(expression.strip())
        return SubscriptionData(topic, expression.strip(), sub_version=version, expression_type=ExpressionType.SQL92)
    if expression_type != ExpressionType.TAG:
        raise FilterExpressionError(f"unknown expression type {expression_type!r}")
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=version)
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise FilterExpressionError(f"tag expression {expression!r} names no tag")
    return SubscriptionData(topic, text, tags, frozenset(tags_hash_code(t) for t in tags), version)
