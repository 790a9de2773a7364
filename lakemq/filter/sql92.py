"""Compile RocketMQ's SQL92 filter language into an :mod:`lakemq.filter.expression` tree.

The subset (RocketMQ 4.x's SelectorParser): ``= <> < <= > >=``, ``[NOT] BETWEEN x AND y``,
``[NOT] IN ('a', 'b')``, ``IS [NOT] NULL``, ``AND OR NOT``, parentheses, string literals in
single quotes (``''`` escapes a quote), integer literals (an ``L`` suffix allowed), decimal
literals, ``TRUE`` / ``FALSE``. Identifiers ``[A-Za-z_$][A-Za-z0-9_$]*`` name message
properties (``TAGS``, ``KEYS`` and user properties), case-sensitively; keywords are not.

sqlglot parses; its tokens are checked against the subset first, identifiers are handed to it
quoted (so a property may be called ``order`` or ``date``), and the tree it returns is
translated node by node: anything else is refused with a :class:`FilterExpressionError`
naming the construct. RocketMQ's own operand checks are applied (no strings or booleans
around ``<``, no NULL around ``=``, IN takes a property and strings, BETWEEN bounds ordered).

Deliberate differences from RocketMQ's grammar, each only where RocketMQ's reading is useless:
``NOT a = 1`` means ``NOT (a = 1)`` (standard SQL precedence; RocketMQ binds NOT to ``a``,
which is then never TRUE); a bare property used as a condition is refused (RocketMQ casts it
to a boolean that is never TRUE); ``0.0`` is a valid literal (RocketMQ refuses it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final

import sqlglot
from sqlglot import expressions as exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType
from sqlglot.tokens import Tokenizer

from lakemq.errors import FilterExpressionError
from lakemq.filter.expression import (
    And,
    Comparison,
    Constant,
    Equal,
    Expression,
    In,
    JavaLong,
    Not,
    Or,
    Property,
    Value,
    evaluate_matches,
    is_boolean,
)
from lakemq.filter.prefilter import PreFilter, build_prefilter

__all__ = ["Sql92Expression", "compile_sql92", "parse_sql92"]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*")
_FLOAT: Final = re.compile(r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_LONG_MAX: Final = 2**63 - 1
_INT_RANGE: Final = (-(2**31), 2**31 - 1)

_KEYWORDS: Final = {
    TokenType.AND: "AND", TokenType.OR: "OR", TokenType.NOT: "NOT", TokenType.BETWEEN: "BETWEEN",
    TokenType.IN: "IN", TokenType.IS: "IS", TokenType.NULL: "NULL", TokenType.TRUE: "TRUE",
    TokenType.FALSE: "FALSE",
}
_OPERATORS: Final = {
    TokenType.L_PAREN: "(", TokenType.R_PAREN: ")", TokenType.COMMA: ",", TokenType.EQ: "=",
    TokenType.NEQ: "<>", TokenType.GT: ">", TokenType.GTE: ">=", TokenType.LT: "<", TokenType.LTE: "<=",
    TokenType.DASH: "-", TokenType.PLUS: "+",
}
# Words that read as operators in some SQL (and in RocketMQ 5's grammar) rather than as names.
_UNSUPPORTED_WORDS: Final = frozenset({"LIKE", "ESCAPE", "CONTAINS", "STARTSWITH", "ENDSWITH", "EXISTS"})
_SUPPORTED: Final = ("supported: = <> < <= > >= [NOT] BETWEEN, [NOT] IN, IS [NOT] NULL, AND, OR, NOT, "
                     "parentheses")

_COMPARISONS: Final[dict[type[exp.Expr], str]] = {
    exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
}
_NODE_NAMES: Final[dict[type[exp.Expr], str]] = {
    exp.Add: "arithmetic '+'", exp.Sub: "arithmetic '-'",
    exp.Mul: "arithmetic '*'", exp.Div: "arithmetic '/'",
    exp.Alias: "two expressions without an operator between them", exp.Like: "LIKE",
}


class Sql92Expression:
    """A compiled filter: ``matches(properties)`` and the :class:`PreFilter` derived from it."""

    __slots__ = ("prefilter", "root", "text")

    def __init__(self, text: str, root: Expression) -> None:
        self.text = text
        self.root = root
        self.prefilter: PreFilter = build_prefilter(root)

    def matches(self, properties: Mapping[str, str]) -> bool:
        return evaluate_matches(self.root, properties)

    def __repr__(self) -> str:
        return f"Sql92Expression({self.text!r})"


@functools.lru_cache(maxsize=1024)
def compile_sql92(text: str) -> Sql92Expression:
    """Compile once per distinct expression string (a subscription's version changes only
    when its string does, so the string alone keys the cache)."""
    return Sql92Expression(text, parse_sql92(text))


def parse_sql92(text: str) -> Expression:
    """The expression tree of ``text``; raises FilterExpressionError with the reason."""
    if not isinstance(text, str) or not text.strip():
        raise FilterExpressionError("a SQL92 expression must not be empty")
    try:
        tokens = Tokenizer().tokenize(text)
    except TokenError as exc:
        raise FilterExpressionError(f"SQL92 expression {text!r} cannot be read: {_first_line(exc)}") from exc
    canonical = _canonical_text(text, tokens)
    try:
        tree = sqlglot.parse_one(canonical)
    except ParseError as exc:
        detail = exc.errors[0]["description"] if exc.errors else _first_line(exc)
        detail = re.sub(r"<class '[\w.]*?(\w+)'>", r"\1", detail)
        raise FilterExpressionError(f"SQL92 expression {text!r} does not parse: {detail}") from exc
    except RecursionError as exc:  # sqlglot's parser recurses about 16 frames per parenthesis
        raise FilterExpressionError(f"SQL92 expression {text!r} is nested too deeply to parse") from exc
    root = _Translator(text).condition(tree)
    return root


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _canonical_text(text: str, tokens: list[Token]) -> str:
    """The tokens checked against the subset and re-joined: identifiers quoted, the ``L``
    suffix of integers dropped, strings re-escaped."""
    parts: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind, raw = token.token_type, token.text
        if kind == TokenType.STRING:
            parts.append("'" + raw.replace("'", "''") + "'")
        elif kind == TokenType.NUMBER or (kind == TokenType.DOT and _adjacent(tokens, i, TokenType.NUMBER)):
            if kind == TokenType.DOT:  # sqlglot reads ".5" as a dot and 5
                i += 1
                token, raw = tokens[i], "0." + tokens[i].text
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and nxt.start == token.end + 1 \
                    and nxt.token_type in (TokenType.VAR, TokenType.NUMBER):
                if nxt.text in ("l", "L") and _DECIMAL.fullmatch(raw):
                    i += 1
                else:
                    raise _bad(text, f"malformed number {raw + nxt.text!r}")
            if not (_DECIMAL.fullmatch(raw) or _FLOAT.fullmatch(raw)):
                raise _bad(text, f"malformed number {raw!r}")
            parts.append(raw)
        elif kind in _KEYWORDS and raw.upper() == _KEYWORDS[kind]:
            parts.append(_KEYWORDS[kind])
        elif kind in _OPERATORS:
            if raw != _OPERATORS[kind]:
                raise _bad(text, f"operator {raw!r} is not SQL92, use {_OPERATORS[kind]!r}")
            parts.append(raw)
        elif kind == TokenType.IDENTIFIER:
            raise _bad(text, f"quoted identifier {raw!r} is not supported, write the property name bare")
        elif _IDENTIFIER.fullmatch(raw):
            if raw.upper() in _UNSUPPORTED_WORDS:
                raise _bad(text, f"{raw.upper()} is not supported ({_SUPPORTED})")
            parts.append(f'"{raw}"')
        else:
            raise _bad(text, f"{raw!r} is not supported ({_SUPPORTED})")
        i += 1
    return " ".join(parts)


def _adjacent(tokens: list[Token], i: int, kind: TokenType) -> bool:
    return i + 1 < len(tokens) and tokens[i + 1].token_type == kind \
        and tokens[i + 1].start == tokens[i].end + 1


def _bad(text: str, message: str) -> FilterExpressionError:
    return FilterExpressionError(f"SQL92 expression {text!r}: {message}")


class _Translator:
    """sqlglot nodes -> expression nodes, refusing what RocketMQ's grammar refuses."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str) -> FilterExpressionError:
        return _bad(self.text, message)

    def condition(self, node: exp.Expr) -> Expression:
        result = self.node(node)
        if not is_boolean(result):
            if isinstance(result, Property):
                raise self.error(f"property {result.name} is not a condition; compare it, e.g. "
                                 f"{result.name} = 'true' or {result.name} IS NOT NULL")
            raise self.error(f"{_show(result)} is not a condition (TRUE, FALSE or a comparison)")
        return result

    def node(self, node: exp.Expr) -> Expression:
        if isinstance(node, exp.Paren):
            return self.node(node.this)
        if isinstance(node, exp.And):
            return And(self.condition(node.this), self.condition(node.expression))
        if isinstance(node, exp.Or):
            return Or(self.condition(node.this), self.condition(node.expression))
        if isinstance(node, exp.Not):
            return Not(self.condition(node.this))
        if isinstance(node, exp.EQ):
            return self.equal(node.this, node.expression)
        if isinstance(node, exp.NEQ):
            return Not(self.equal(node.this, node.expression))
        if type(node) in _COMPARISONS:
            return self.comparison(_COMPARISONS[type(node)], self.node(node.this), self.node(node.expression))
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise self.error("only IS NULL and IS NOT NULL are supported")
            return Equal(self.node(node.this), Constant(None))
        if isinstance(node, exp.Between):
            return self.between(node)
        if isinstance(node, exp.In):
            return self.in_list(node)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, (exp.Literal, exp.Neg)):
            return Constant(self.number_or_string(node))
        if isinstance(node, exp.Boolean):
            return Constant(bool(node.this))
        if isinstance(node, exp.Null):
            return Constant(None)
        name = _NODE_NAMES.get(type(node), type(node).__name__)
        raise self.error(f"{name} is not supported ({_SUPPORTED})")

    def column(self, node: exp.Column) -> Property:
        ident = node.this
        if node.table or not isinstance(ident, exp.Identifier) or not _IDENTIFIER.fullmatch(ident.name):
            raise self.error(f"{node.sql()} is not a property name")
        return Property(ident.name)

    def number_or_string(self, node: exp.Expr) -> Value:
        if isinstance(node, exp.Neg):
            value = self.number_or_string(node.this)
            if isinstance(value, str) or value is None:
                raise self.error("'-' applies to numbers only")
            return JavaLong(-value) if isinstance(value, JavaLong) else -value
        if not isinstance(node, exp.Literal):
            raise self.error(f"'-' applies to number literals only, not {node.sql()}")
        if node.is_string:
            return str(node.this)
        raw = str(node.this)
        if _DECIMAL.fullmatch(raw):
            # No leading zeros: more digits than a long's is out of range (and int() refuses
            # over 4300 digits).
            if len(raw) > len(str(_LONG_MAX)) or int(raw) > _LONG_MAX:
                raise self.error(f"integer {raw if len(raw) <= 40 else raw[:40] + '...'} is out of the range of a long")
            value = int(raw)
            return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else JavaLong(value)
        number = float(raw)
        if number == float("inf"):
            raise self.error(f"decimal {raw} is out of the range of a double")
        return number

    def equal(self, left_node: exp.Expr, right_node: exp.Expr) -> Equal:
        left, right = self.node(left_node), self.node(right_node)
        for side in (left, right):
            if isinstance(side, Constant) and side.value is None:
                raise self.error("NULL cannot be compared with '=' or '<>'; use IS NULL / IS NOT NULL")
        if isinstance(left, Constant) and isinstance(right, Constant) \
                and isinstance(left.value, bool) and not isinstance(right.value, bool):
            raise self.error(f"{_show(left)} cannot be compared with {_show(right)}")
        return Equal(left, right)

    def comparison(self, op: str, left: Expression, right: Expression) -> Comparison:
        for side in (left, right):
            if is_boolean(side) or (isinstance(side, Constant) and not _is_number(side.value)):
                raise self.error(f"{_show(side)} cannot be compared with '{op}': "
                                 "only numbers and properties can")
        return Comparison(op, left, right)

    def between(self, node: exp.Between) -> Expression:
        value, low, high = self.node(node.this), self.node(node.args["low"]), self.node(node.args["high"])
        if isinstance(low, Constant) and isinstance(high, Constant) and _is_number(low.value) \
                and _is_number(high.value) and high.value < low.value:  # type: ignore[operator]
            raise self.error(f"BETWEEN {_show(low)} AND {_show(high)}: the low bound is above the high bound")
        return And(self.comparison(">=", value, low), self.comparison("<=", value, high))

    def in_list(self, node: exp.In) -> In:
        if node.args.get("query") is not None or node.args.get("unnest") is not None or not node.expressions:
            raise self.error("IN takes a list of string literals")
        prop = self.node(node.this)
        if not isinstance(prop, Property):
            raise self.error(f"IN applies to a property, not {_show(prop)}")
        values: list[str] = []
        for item in node.expressions:
            if not (isinstance(item, exp.Literal) and item.is_string):
                raise self.error(f"IN lists string literals only, not {item.sql()}")
            values.append(str(item.this))
        return In(prop, frozenset(values))


def _is_number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(node: Expression) -> str:
    if isinstance(node, Property):
        return node.name
    if isinstance(node, Constant):
        value = node.value
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return str(int(value)) if isinstance(value, int) else repr(value)
    return "a condition"
