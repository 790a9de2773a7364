"""The SQL92 filter's expression tree and its evaluation, with RocketMQ's semantics.

Values are Python objects standing for RocketMQ's Java ones: ``str`` (String: every message
property), ``int`` (Integer), :class:`JavaLong` (Long), ``float`` (Double), ``bool`` and
``None`` (NULL, also an unknown property). Evaluation follows RocketMQ's filter module
(ComparisonExpression, LogicExpression, UnaryExpression, parsed with string conversion on):

- ``<  <=  >  >=``: NULL on either side gives NULL; two strings are both read as doubles; a
  string against a number is read as that number's type (``a > 5`` reads ``a`` as an
  Integer, so ``"5.5"`` cannot be read and ``a > 5.0`` is the way to compare decimals).
- ``=``: NULL on the left gives NULL, NULL only on the right gives FALSE, NULL on both TRUE
  (so ``IS NULL`` is ``= NULL``); otherwise equal values, or values equal after the same
  conversion as above.
- ``IN``: NULL for an unknown property, else membership of the property's string.
- AND / OR / NOT: three-valued (Kleene) logic, evaluated left to right with short cuts.
- A property that cannot be read as the number it is compared with raises an error in Java;
  RocketMQ's broker then counts the whole message as not matching. :class:`EvaluationError`
  does the same here, so ``NOT (a > 5)`` does not match ``a = 'abc'`` either.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from lakemq.errors import EvaluationError

__all__ = [
    "And",
    "Comparison",
    "Constant",
    "Equal",
    "Expression",
    "In",
    "JavaLong",
    "Not",
    "Or",
    "Property",
    "Value",
    "evaluate_matches",
    "is_boolean",
]


class JavaLong(int):
    """An integer literal outside Java's int range: properties compared with it are read as
    64-bit longs instead of 32-bit ints."""


Value: TypeAlias = str | int | float | bool | None
Properties: TypeAlias = Mapping[str, str]


_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+")
# Java's Double.valueOf decimal syntax (hex floats left out); surrounding whitespace is trimmed.
_DOUBLE_TEXT: Final = re.compile(
    r"([+-]?)(NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?")
_INT_RANGE: Final = (-(2**31), 2**31 - 1)
_LONG_RANGE: Final = (-(2**63), 2**63 - 1)
_LONG_DIGITS: Final = len(str(_LONG_RANGE[1]))


def _parse_integral(text: str, bounds: tuple[int, int], what: str) -> int:
    if _INT_TEXT.fullmatch(text) is None:
        raise EvaluationError(f"{text!r} is not {what}")
    # Java reads any number of leading zeros; more digits than a long's is out of range, and
    # int() refuses text of over 4300 digits.
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > _LONG_DIGITS:
        raise EvaluationError(f"{text[:40]!r}... is out of the range of {what}")
    value = -int(digits) if text[0] == "-" else int(digits)
    if not bounds[0] <= value <= bounds[1]:
        raise EvaluationError(f"{text!r} is out of the range of {what}")
    return value


def _parse_double(text: str) -> float:
    match = _DOUBLE_TEXT.fullmatch(text.strip(" \t\n\r\x0b\x0c\x00"))
    if match is None:
        raise EvaluationError(f"{text!r} is not a number")
    sign, number = match.groups()
    if number == "NaN":
        return math.nan
    value = math.inf if number == "Infinity" else float(number)
    return -value if sign == "-" else value


def _read_as(text: str, like: Value) -> Value:
    """``text`` converted to the type of ``like`` (Java's valueOf for that class)."""
    if isinstance(like, bool):
        return text.lower() == "true"
    if isinstance(like, JavaLong):
        return _parse_integral(text, _LONG_RANGE, "a long")
    if isinstance(like, int):
        return _parse_integral(text, _INT_RANGE, "an integer")
    return _parse_double(text)


def _java_compare(lv: Value, rv: Value) -> int:
    """Java's ``compareTo`` after RocketMQ's conversions; -1 for types that do not convert."""
    if isinstance(lv, str) and not isinstance(rv, str):
        lv = _read_as(lv, rv)
    elif isinstance(rv, str) and not isinstance(lv, str):
        rv = _read_as(rv, lv)
    elif isinstance(lv, bool) != isinstance(rv, bool):
        return -1
    if isinstance(lv, float) or isinstance(rv, float):
        return _compare_doubles(float(lv), float(rv))  # type: ignore[arg-type]
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def _compare_doubles(a: float, b: float) -> int:
    # Double.compareTo: NaN is above everything and equal to itself; -0.0 is below 0.0.
    if math.isnan(a) or math.isnan(b):
        return (not math.isnan(b)) - (not math.isnan(a))
    if a == b == 0.0:
        return (math.copysign(1, a) > 0) - (math.copysign(1, b) > 0)
    return (a > b) - (a < b)


class Expression:
    """A node; ``evaluate`` returns TRUE / FALSE / NULL for conditions, a value otherwise."""

    __slots__ = ()

    def evaluate(self, properties: Properties) -> Value:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Property(Expression):
    name: str

    def evaluate(self, properties: Properties) -> Value:
        return properties.get(self.name)


@dataclass(frozen=True, slots=True)
class Constant(Expression):
    value: Value

    def evaluate(self, properties: Properties) -> Value:
        return self.value


_ORDER: Final[dict[str, Callable[[int, int], bool]]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class Comparison(Expression):
    op: str  # one of < <= > >=
    left: Expression
    right: Expression

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        if lv is None:
            return None
        rv = self.right.evaluate(properties)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            lv, rv = _parse_double(lv), _parse_double(rv)
        return _ORDER[self.op](_java_compare(lv, rv), 0)


@dataclass(frozen=True, slots=True)
class Equal(Expression):
    left: Expression
    right: Expression

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        rv = self.right.evaluate(properties)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if type(lv) is type(rv) and lv == rv:
            return True
        return _java_compare(lv, rv) == 0


@dataclass(frozen=True, slots=True)
class In(Expression):
    prop: Property
    values: frozenset[str]

    def evaluate(self, properties: Properties) -> Value:
        value = properties.get(self.prop.name)
        if value is None:
            return None
        return value in self.values


@dataclass(frozen=True, slots=True)
class Not(Expression):
    operand: Expression

    def evaluate(self, properties: Properties) -> Value:
        value = self.operand.evaluate(properties)
        return None if value is None else not value


@dataclass(frozen=True, slots=True)
class And(Expression):
    left: Expression
    right: Expression

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        if lv is False:
            return False
        rv = self.right.evaluate(properties)
        if rv is False:
            return False
        return None if lv is None or rv is None else True


@dataclass(frozen=True, slots=True)
class Or(Expression):
    left: Expression
    right: Expression

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        if lv is True:
            return True
        rv = self.right.evaluate(properties)
        if rv is True:
            return True
        return None if lv is None or rv is None else False


def is_boolean(node: Expression) -> bool:
    """Whether ``node`` yields TRUE / FALSE / NULL (RocketMQ's BooleanExpression)."""
    if isinstance(node, Constant):
        return isinstance(node.value, bool)
    return isinstance(node, (Comparison, Equal, In, Not, And, Or))


def evaluate_matches(root: Expression, properties: Properties) -> bool:
    """RocketMQ's ``matches``: TRUE only; NULL, FALSE and conversion errors do not match."""
    try:
        return root.evaluate(properties) is True
    except EvaluationError:
        return False
