"""A SQL92 subscription as a consumer's heartbeat brings it: compiled (sqlglot and the
translator), then evaluated against properties (the input after its first NUL:
``name\\x01value\\x02``), its prefilter included."""

from __future__ import annotations

from typing import Final

from lakemq.common.message import string_to_properties
from lakemq.errors import FilterExpressionError
from lakemq.filter.sql92 import compile_sql92

ALLOWED: Final = (FilterExpressionError,)


def one_input(data: bytes) -> None:
    text, _, props = data.decode("utf-8", "replace").partition("\0")
    expression = compile_sql92(text)
    expression.matches(string_to_properties(props))
