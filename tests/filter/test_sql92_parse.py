"""The SQL92 subset: what compiles (and to which tree), what is refused and why."""

from __future__ import annotations

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.errors import FilterExpressionError
from lakemq.filter import compile_sql92, parse_sql92
from lakemq.filter.expression import And, Comparison, Constant, Equal, In, JavaLong, Not, Or, Property

a, b = Property("a"), Property("b")


@pytest.mark.parametrize("text, tree", [
    ("a > 5", Comparison(">", a, Constant(5))),
    ("a >= 5 AND b < 2.5", And(Comparison(">=", a, Constant(5)), Comparison("<", b, Constant(2.5)))),
    ("a <= -3 or b <> 'x'", Or(Comparison("<=", a, Constant(-3)), Not(Equal(b, Constant("x"))))),
    ("a = 'it''s'", Equal(a, Constant("it's"))),
    ("a = 'x\\y'", Equal(a, Constant("x\\y"))),  # no backslash escapes in SQL92 strings
    ("a BETWEEN 1 AND 3", And(Comparison(">=", a, Constant(1)), Comparison("<=", a, Constant(3)))),
    ("a NOT BETWEEN 1 AND 3", Not(And(Comparison(">=", a, Constant(1)), Comparison("<=", a, Constant(3))))),
    ("a IN ('x', 'y')", In(a, frozenset({"x", "y"}))),
    ("a NOT IN ('x')", Not(In(a, frozenset({"x"})))),
    ("a IS NULL", Equal(a, Constant(None))),
    ("a IS NOT NULL", Not(Equal(a, Constant(None)))),
    ("NOT (a = 1)", Not(Equal(a, Constant(1)))),
    ("NOT a = 1", Not(Equal(a, Constant(1)))),
    ("TRUE", Constant(True)),
    ("a = TRUE", Equal(a, Constant(True))),
    ("a > 5L", Comparison(">", a, Constant(5))),
    ("a > 3000000000", Comparison(">", a, Constant(JavaLong(3000000000)))),
    ("a > 1.5e3", Comparison(">", a, Constant(1500.0))),
    ("a > .5", Comparison(">", a, Constant(0.5))),
    ("TAGS = 'tagA' AND KEYS IS NOT NULL", And(Equal(Property("TAGS"), Constant("tagA")),
                                              Not(Equal(Property("KEYS"), Constant(None))))),
    ("order > 1 and date = 2", And(Comparison(">", Property("order"), Constant(1)),
                                   Equal(Property("date"), Constant(2)))),
    ("$x_1 = 'v' -- comment\n", Equal(Property("$x_1"), Constant("v"))),
    ("a = 1 /* block */ AnD b = 2", And(Equal(a, Constant(1)), Equal(b, Constant(2)))),
    ("(a = 1 OR b = 2) AND a > 0", And(Or(Equal(a, Constant(1)), Equal(b, Constant(2))),
                                       Comparison(">", a, Constant(0)))),
])
def test_accepts(text: str, tree: object) -> None:
    assert parse_sql92(text) == tree


def test_long_constant_keeps_its_java_type() -> None:
    node = parse_sql92("a > 3000000000")
    assert isinstance(node, Comparison) and isinstance(node.right, Constant)
    assert isinstance(node.right.value, JavaLong)


@pytest.mark.parametrize("text, reason", [
    ("", "must not be empty"),
    ("   ", "must not be empty"),
    ("a == 5", "'==' is not SQL92, use '='"),
    ("a != 5", "'!=' is not SQL92, use '<>'"),
    ("a", "property a is not a condition"),
    ("5", "5 is not a condition"),
    ("a > 'x'", "'x' cannot be compared with '>'"),
    ("a > TRUE", "TRUE cannot be compared with '>'"),
    ("(a > 1) > 2", "a condition cannot be compared with '>'"),
    ("a = NULL", "NULL cannot be compared"),
    ("TRUE = 5", "TRUE cannot be compared with 5"),
    ("a LIKE 'x%'", "LIKE is not supported"),
    ("a CONTAINS 'x'", "CONTAINS is not supported"),
    ("a + 1 > 2", "arithmetic '+' is not supported"),
    ("a * 2 > 2", "'*' is not supported"),
    ('"a" = 1', "quoted identifier"),
    ("a.b = 1", "'.' is not supported"),
    ("a > 5; DROP", "';' is not supported"),
    ("a = 1 b", "without an operator"),
    ("a BETWEEN 5 AND 1", "low bound is above the high bound"),
    ("a BETWEEN 'x' AND 'y'", "cannot be compared with '>='"),
    ("5 IN ('x')", "IN applies to a property"),
    ("a IN (1, 2)", "IN lists string literals only"),
    ("a IS TRUE", "only IS NULL and IS NOT NULL"),
    ("a = 1 OR", "does not parse"),
    ("(a = 1", "does not parse"),
    ("a = 'open", "cannot be read"),
    ("a = 05", "malformed number '05'"),
    ("a = 1e", "malformed number '1e'"),
    ("a = 5x", "malformed number '5x'"),
    ("a > 9223372036854775808", "out of the range of a long"),
    ("-a > 1", "'-' applies to number literals only"),
    ("a AND b = 1", "property a is not a condition"),
])
def test_refuses_with_reason(text: str, reason: str) -> None:
    with pytest.raises(FilterExpressionError) as info:
        parse_sql92(text)
    assert reason in str(info.value)
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert isinstance(info.value, ValueError)


def test_compile_is_cached_per_expression_string() -> None:
    first = compile_sql92("cache_probe > 1")
    assert compile_sql92("cache_probe > 1") is first
    assert compile_sql92("cache_probe > 2") is not first
