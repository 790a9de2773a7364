"""Evaluation with RocketMQ's semantics: conversions, NULLs, three-valued logic."""

from __future__ import annotations

import pytest

from lakemq.filter import compile_sql92, parse_sql92


def matches(text: str, **props: str) -> bool:
    return compile_sql92(text).matches(props)


def value(text: str, **props: str) -> object:
    return parse_sql92(text).evaluate(props)


@pytest.mark.parametrize("text, props, expected", [
    # numbers: a property string is read as the constant's type
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a > 5", {"a": "+6"}, True),
    ("a >= 5", {"a": "5"}, True),
    ("a < -1", {"a": "-2"}, True),
    ("a > 5", {"a": "5.5"}, False),       # Integer.valueOf("5.5") fails: no match
    ("a > 5.0", {"a": "5.5"}, True),      # Double.valueOf reads it
    ("a > 5.0", {"a": " 6 "}, True),      # Double.valueOf trims
    ("a > 5", {"a": " 6 "}, False),       # Integer.valueOf does not
    ("a > 5", {"a": "abc"}, False),
    ("a > 5", {"a": "3000000000"}, False),  # beyond an int
    ("a > 3000000000", {"a": "3000000001"}, True),  # a long constant reads longs
    ("a > 1.0", {"a": "1e3"}, True),
    ("a > 1.0", {"a": "NaN"}, True),      # Double.compareTo puts NaN above everything
    ("a < 1.0", {"a": "-Infinity"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a = 5", {"a": "5.0"}, False),
    ("a = 5.0", {"a": "5"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a > b", {"a": "10", "b": "9.5"}, True),   # two strings: both read as doubles
    ("a > b", {"a": "x", "b": "1"}, False),
    # strings
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a = b", {"a": "v", "b": "v"}, True),
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("TAGS = 'tagA'", {"TAGS": "tagA"}, True),
    ("KEYS = 'k1'", {"KEYS": "k1"}, True),
    # booleans
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = FALSE", {"a": "yes"}, True),    # Boolean.valueOf: anything but "true" is false
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NOT FALSE", {}, True),
])
def test_values(text: str, props: dict[str, str], expected: bool) -> None:
    assert compile_sql92(text).matches(props) is expected


@pytest.mark.parametrize("text, expected", [
    ("a > 5", None),
    ("a = 5", None),
    ("a = 'x'", None),
    ("a <> 'x'", None),
    ("a IN ('x')", None),
    ("a NOT IN ('x')", None),
    ("a BETWEEN 1 AND 2", None),
    ("a IS NULL", True),
    ("a IS NOT NULL", False),
    ("5 = a", False),      # RocketMQ: a NULL only on the right is FALSE...
    ("5 <> a", True),      # ...so its negation is TRUE
    ("a = b", True),       # NULL = NULL
    ("NOT (a > 5)", None),
])
def test_unknown_property_is_null(text: str, expected: object) -> None:
    assert value(text) is expected
    assert matches(text) is (expected is True)


# Kleene logic: x, y in {TRUE, FALSE, NULL} produced by p = 1 / p = 0 / p missing.
_OPERAND = {True: "1", False: "0", None: None}


@pytest.mark.parametrize("x", [True, False, None])
@pytest.mark.parametrize("y", [True, False, None])
def test_three_valued_logic(x: bool | None, y: bool | None) -> None:
    props = {k: v for k, v in (("p", _OPERAND[x]), ("q", _OPERAND[y])) if v is not None}
    expected_and = False if False in (x, y) else (None if None in (x, y) else True)
    expected_or = True if True in (x, y) else (None if None in (x, y) else False)
    assert value("p = 1 AND q = 1", **props) is expected_and
    assert value("p = 1 OR q = 1", **props) is expected_or
    assert value("NOT p = 1", **props) is (None if x is None else not x)


def test_conversion_error_fails_the_whole_message() -> None:
    # RocketMQ raises and the broker counts the message as not matching, even under NOT / OR.
    assert not matches("NOT (a > 5)", a="abc")
    assert not matches("a > 5 OR b = 'x'", a="abc", b="x")
    # ...unless evaluation never reaches the bad comparison (left to right, short cuts).
    assert matches("b = 'x' OR a > 5", a="abc", b="x")
    assert not matches("b = 'y' AND a > 5", a="abc", b="x")


def test_boolean_against_number_is_never_equal() -> None:
    assert value("(a > 1) = TRUE", a="2") is True
    assert value("(a > 1) = 1", a="2") is False
