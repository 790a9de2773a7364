"""Message filtering shared by broker and client: RocketMQ's SQL92 property filters.

``compile_sql92(text)`` compiles (and caches) an expression or raises
:class:`lakemq.errors.FilterExpressionError`; the result's ``matches(properties)`` evaluates it
with RocketMQ's semantics and its ``prefilter`` rejects most non-matching records from their
raw bytes. :class:`Sql92MessageFilter` is what the broker hands the store for a SQL92
subscription. ``parse_subscription`` parses a subscription, a tag expression (``tagA ||
tagB``) or a SQL92 one, for broker and client alike. Depends on lakemq.common and sqlglot only.
"""

from typing import TYPE_CHECKING, Any

from lakemq.filter.message_filter import Sql92MessageFilter, record_properties
from lakemq.filter.prefilter import PreFilter
from lakemq.filter.subscription import parse_subscription

if TYPE_CHECKING:
    from lakemq.filter.sql92 import Sql92Expression, compile_sql92, parse_sql92

__all__ = [
    "PreFilter",
    "Sql92Expression",
    "Sql92MessageFilter",
    "compile_sql92",
    "parse_sql92",
    "parse_subscription",
    "record_properties",
]


def __getattr__(name: str) -> Any:
    """The SQL92 compiler's names, imported on first use: sqlglot costs a process about 0.14 s
    to import, and a broker or client without SQL92 subscriptions never needs it."""
    if name in ("Sql92Expression", "compile_sql92", "parse_sql92"):
        from lakemq.filter import sql92

        return getattr(sql92, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
