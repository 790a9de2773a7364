"""A subscription expression of either type (parse_subscription, which a heartbeat's or a
pull's subscription goes through); the first byte picks TAG, SQL92 or another type."""

from __future__ import annotations

from typing import Final

from lakemq.errors import FilterExpressionError
from lakemq.filter import parse_subscription

ALLOWED: Final = (FilterExpressionError,)
TYPES: Final = ("TAG", "SQL92", None, "CLASS")


def one_input(data: bytes) -> None:
    if not data:
        return
    parse_subscription("T", data[1:].decode("utf-8", "replace"), TYPES[data[0] % len(TYPES)], sub_version=1)
