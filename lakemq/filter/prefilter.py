"""Necessary conditions of a SQL92 filter, checked on raw bytes before any decoding.

RocketMQ keeps a bloom filter bit map per consume-queue entry (computed at dispatch) so that a
pull skips messages that cannot match. lakemq derives from the expression a conjunction of
clauses instead; each clause lists atoms of which at least one must hold for the expression to
be TRUE. An atom is "property ``name`` equals ``value``", checked as a byte substring of the
record's properties string (``name\\x01value\\x02...``, framed by the separators so names
and values match whole), or "this comparison of property ``name`` with constants is TRUE
(or FALSE)", checked by slicing that one value out of the bytes and evaluating the comparison
alone. So ``region = 'eu' AND price > 100`` needs ``\\x02region\\x01eu\\x02`` and a ``price``
above 100; most non-matching messages fail that scan and are never decoded.

The derivation is sound for RocketMQ's three-valued semantics (a NULL operand never makes a
comparison TRUE, and NOT x is TRUE only when x is FALSE, which again needs the operands), so
the pre-filter never drops a message the full evaluation would accept. A clause made only of
``TAGS`` equalities also yields the tag hash codes the ConsumeQueue entry must carry, which
decides before the CommitLog is read at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeAlias

from lakemq.common.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, MessageConst, tags_hash_code
from lakemq.errors import EvaluationError
from lakemq.filter.expression import (
    And,
    Comparison,
    Constant,
    Equal,
    Expression,
    In,
    Not,
    Or,
    Property,
)

__all__ = ["MAX_CLAUSES", "Atom", "PreFilter", "build_prefilter"]

# Dropping clauses only weakens the pre-filter, never makes it wrong; the cap bounds the
# cross product an OR of ORs would build.
MAX_CLAUSES: Final = 16
_SEP: Final = PROPERTY_SEPARATOR.encode()
_NV: Final = NAME_VALUE_SEPARATOR.encode()


@dataclass(frozen=True, slots=True)
class Atom:
    """Property ``name`` equals ``value``; or, with ``test`` set, ``test`` (a condition on
    ``name`` and constants only) evaluates to ``expect``; or, with neither, ``name`` is set."""

    name: str
    value: str | None = None
    test: Expression | None = None
    expect: bool = True

    def sort_key(self) -> tuple[str, str, str]:
        return self.name, self.value or "", repr(self.test)


Clause: TypeAlias = frozenset[Atom]
Cnf: TypeAlias = tuple[Clause, ...]
_IMPOSSIBLE: Final[Cnf] = (frozenset(),)


@dataclass(frozen=True, slots=True)
class _Check:
    pattern: bytes
    atom: Atom

    def holds(self, framed: bytes) -> bool:
        atom = self.atom
        if atom.test is None:
            return self.pattern in framed
        # The last occurrence wins, as when the properties are decoded into a dict.
        at = framed.rfind(self.pattern)
        if at < 0:
            return False
        start = at + len(self.pattern)
        value = framed[start : framed.index(_SEP, start)].decode("utf-8", "replace")
        try:
            return atom.test.evaluate({atom.name: value}) is atom.expect
        except EvaluationError:
            return False


def _check(atom: Atom) -> _Check:
    pattern = _SEP + atom.name.encode("utf-8") + _NV
    if atom.value is not None:
        pattern += atom.value.encode("utf-8") + _SEP
    return _Check(pattern, atom)


@dataclass(frozen=True, slots=True)
class PreFilter:
    clauses: Cnf
    _checks: tuple[tuple[_Check, ...], ...] = field(init=False, repr=False, compare=False)
    tags_codes: frozenset[int] | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # Cheap substring checks first, within a clause and among clauses.
        checks = sorted((tuple(sorted((_check(a) for a in c), key=lambda k: k.atom.test is not None))
                         for c in self.clauses), key=lambda c: sum(k.atom.test is not None for k in c))
        object.__setattr__(self, "_checks", tuple(checks))
        codes: frozenset[int] | None = None
        for clause in self.clauses:
            if clause and all(a.name == MessageConst.TAGS and a.value is not None for a in clause):
                clause_codes = frozenset(tags_hash_code(a.value) for a in clause)
                codes = clause_codes if codes is None else codes & clause_codes
        object.__setattr__(self, "tags_codes", codes)

    @property
    def is_trivial(self) -> bool:
        return not self.clauses

    def may_match_properties(self, raw_properties: bytes | bytearray | memoryview) -> bool:
        """False when the properties string proves the expression cannot be TRUE."""
        if not self._checks:
            return True
        framed = _SEP + bytes(raw_properties) + _SEP
        for clause in self._checks:
            for check in clause:
                if check.holds(framed):
                    break
            else:
                return False
        return True

    def may_match_tags_code(self, tags_code: int) -> bool:
        """False when the ConsumeQueue tags code proves the TAGS clause fails (hash codes may
        collide, so True is only a maybe)."""
        return self.tags_codes is None or tags_code in self.tags_codes


def build_prefilter(root: Expression) -> PreFilter:
    return PreFilter(_need(root, True))


def _cap(clauses: list[Clause]) -> Cnf:
    unique = sorted(set(clauses), key=lambda c: (len(c), sorted(a.sort_key() for a in c)))
    return tuple(unique[:MAX_CLAUSES])


def _all_of(a: Cnf, b: Cnf) -> Cnf:
    return _cap([*a, *b])


def _any_of(a: Cnf, b: Cnf) -> Cnf:
    if not a or not b:
        return ()
    return _cap([ca | cb for ca in a for cb in b])


def _one(atom: Atom) -> Cnf:
    return (frozenset({atom}),)


def _need(node: Expression, outcome: bool) -> Cnf:
    """Clauses that hold whenever ``node`` evaluates to ``outcome`` (TRUE or FALSE)."""
    if isinstance(node, (And, Or)):
        left, right = _need(node.left, outcome), _need(node.right, outcome)
        # AND is TRUE / OR is FALSE only when both sides are; otherwise one side decides.
        return _all_of(left, right) if isinstance(node, And) == outcome else _any_of(left, right)
    if isinstance(node, Not):
        return _need(node.operand, not outcome)
    if isinstance(node, Constant):
        return () if node.value is outcome else _IMPOSSIBLE
    if isinstance(node, In):
        if outcome:
            return (frozenset(Atom(node.prop.name, v) for v in node.values),)
        return _one(Atom(node.prop.name, test=node, expect=False))
    if isinstance(node, Comparison):
        return _single_property(node, node.left, node.right, outcome)
    if isinstance(node, Equal):
        return _equal(node, outcome)
    return ()


def _single_property(node: Expression, left: Expression, right: Expression, outcome: bool) -> Cnf:
    """A comparison is TRUE or FALSE only with both operands set."""
    props = [side for side in (left, right) if isinstance(side, Property)]
    if len(props) == 1 and all(isinstance(side, (Property, Constant)) for side in (left, right)):
        return _one(Atom(props[0].name, test=node, expect=outcome))
    return tuple(frozenset({Atom(p.name)}) for p in props)


def _equal(node: Equal, outcome: bool) -> Cnf:
    left, right = node.left, node.right
    if not outcome:
        # A NULL left side gives NULL or TRUE, never FALSE; a NULL right side alone gives FALSE.
        if not isinstance(left, Property):
            return ()
        if isinstance(right, Constant) and right.value is not None:
            return _one(Atom(left.name, test=node, expect=False))
        return _one(Atom(left.name))
    for prop, other in ((left, right), (right, left)):
        if isinstance(prop, Property) and isinstance(other, Constant) and other.value is not None:
            if isinstance(other.value, str):
                return _one(Atom(prop.name, other.value))
            return _one(Atom(prop.name, test=node, expect=True))
    return ()
