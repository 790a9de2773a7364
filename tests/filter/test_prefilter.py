"""The byte-level pre-filter: never drops a match, and rejects most non-matches undecoded."""

from __future__ import annotations

import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import MessageConst, properties_to_string, tags_hash_code
from lakemq.filter import compile_sql92
from lakemq.filter.expression import Comparison, Constant, Property
from lakemq.filter.prefilter import MAX_CLAUSES, Atom

_NAMES = ("a", "b", "TAGS")
_VALUES = ("x", "y", "1", "5", "10", "", "true")


def _atom() -> st.SearchStrategy[str]:
    name = st.sampled_from(_NAMES)
    string = st.sampled_from(_VALUES).map(lambda v: "'" + v + "'")
    number = st.sampled_from(("0", "1", "5", "5.5", "-1"))
    return st.one_of(
        st.tuples(name, st.sampled_from(("=", "<>")), st.one_of(string, number)).map(" ".join),
        st.tuples(name, st.sampled_from(("<", "<=", ">", ">=")), number).map(" ".join),
        st.tuples(name, st.sampled_from(("IN", "NOT IN")), st.lists(string, min_size=1, max_size=3))
        .map(lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"),
        st.tuples(name, st.sampled_from(("IS NULL", "IS NOT NULL"))).map(" ".join),
        st.tuples(name, st.sampled_from(("BETWEEN 1 AND 5", "NOT BETWEEN 1 AND 5"))).map(" ".join),
        st.sampled_from(("TRUE", "FALSE", "5 = a", "a = b")),
    )


_EXPRESSIONS = st.recursive(
    _atom(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(("AND", "OR")), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"NOT ({e})"),
    ),
    max_leaves=8,
)
_PROPERTIES = st.dictionaries(st.sampled_from(_NAMES + ("UNIQ_KEY",)), st.sampled_from(_VALUES), max_size=4)


@settings(max_examples=400, deadline=None)
@given(_EXPRESSIONS, _PROPERTIES)
def test_never_rejects_a_match(text: str, props: dict[str, str]) -> None:
    expression = compile_sql92(text)
    raw = properties_to_string(props).encode()
    if expression.matches(props):
        assert expression.prefilter.may_match_properties(raw), (text, props, expression.prefilter.clauses)
        assert expression.prefilter.may_match_properties(raw.rstrip(b"\x02"))  # unterminated last pair
        assert expression.prefilter.may_match_tags_code(tags_hash_code(props.get("TAGS")))


def test_clauses_are_whole_name_and_value_matches() -> None:
    pre = compile_sql92("region = 'eu' AND price > 100").prefilter
    assert pre.may_match_properties(b"region\x01eu\x02price\x01150\x02")
    assert not pre.may_match_properties(b"region\x01eu-west\x02price\x01150\x02")  # value must be whole
    assert not pre.may_match_properties(b"subregion\x01eu\x02price\x01150\x02")    # name must be whole
    assert not pre.may_match_properties(b"region\x01eu\x02")                        # price missing
    assert not pre.may_match_properties(b"region\x01eu\x02price\x0199\x02")          # price too low
    assert pre.may_match_properties(b"price\x0199\x02region\x01eu\x02price\x01101")  # the last one counts
    assert pre.tags_codes is None


def test_or_of_conditions_keeps_a_combined_clause() -> None:
    pre = compile_sql92("(a = 'x' AND b > 1) OR c IN ('p', 'q')").prefilter
    b_above_1 = Atom("b", test=Comparison(">", Property("b"), Constant(1)))
    assert pre.clauses == (frozenset({Atom("a", "x"), Atom("c", "p"), Atom("c", "q")}),
                           frozenset({b_above_1, Atom("c", "p"), Atom("c", "q")}))
    assert pre.may_match_properties(b"c\x01q\x02")
    assert pre.may_match_properties(b"a\x01x\x02b\x012\x02")
    assert not pre.may_match_properties(b"a\x01x\x02b\x011\x02")
    assert not pre.may_match_properties(b"a\x01x\x02")


def test_negations_and_null_tests() -> None:
    assert compile_sql92("a IS NULL").prefilter.is_trivial
    assert compile_sql92("NOT (a IS NULL)").prefilter.clauses == (frozenset({Atom("a")}),)
    not_x = compile_sql92("NOT (a = 'x')").prefilter
    assert not_x.may_match_properties(b"a\x01y\x02")
    assert not not_x.may_match_properties(b"a\x01x\x02")
    assert not not_x.may_match_properties(b"b\x01y\x02")
    # a value that cannot be read as the constant's number fails the message (RocketMQ)
    assert not compile_sql92("NOT (a > 5)").prefilter.may_match_properties(b"a\x01abc\x02")
    assert compile_sql92("5 <> a").prefilter.is_trivial  # TRUE when a is missing (RocketMQ)
    assert not compile_sql92("FALSE").prefilter.may_match_properties(b"a\x011\x02")


def test_clause_count_is_capped() -> None:
    text = " AND ".join(f"(p{i} = 'x' OR q{i} = 'y')" for i in range(3))
    wide = " OR ".join(f"({text.replace('p', f'p{j}_')})" for j in range(4))
    assert len(compile_sql92(wide).prefilter.clauses) <= MAX_CLAUSES


def test_tags_clause_decides_on_the_consume_queue_code() -> None:
    pre = compile_sql92("TAGS IN ('tagA', 'tagB') AND price > 5").prefilter
    assert pre.tags_codes == {tags_hash_code("tagA"), tags_hash_code("tagB")}
    assert pre.may_match_tags_code(tags_hash_code("tagB"))
    assert not pre.may_match_tags_code(tags_hash_code("tagC"))
    assert not pre.may_match_tags_code(0)  # no tag at all


def _properties(rng: random.Random, i: int) -> dict[str, str]:
    props = {
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"7F000001{i:024X}",
        MessageConst.TAGS: rng.choice(("tagA", "tagB", "tagC", "tagD")),
        "region": rng.choice(("eu", "us", "apac", "latam", "mea")),
        "price": str(rng.randint(0, 1000)),
        MessageConst.WAIT_STORE_MSG_OK: "true",
    }
    if rng.random() < 0.5:
        props["vip"] = rng.choice(("true", "false"))
    return props


def test_micro_benchmark_rejects_most_non_matches_without_decoding() -> None:
    """Over 20,000 realistic property strings, > 90% of the non-matching ones are rejected
    by the byte scan alone. Timings are printed (``-s``), not asserted."""
    rng = random.Random(7)
    rows = [_properties(rng, i) for i in range(20_000)]
    raws = [properties_to_string(p).encode() for p in rows]
    for text in ("region = 'eu' AND price > 500",
                 "region IN ('eu', 'us') AND vip = 'true' AND price BETWEEN 100 AND 200",
                 "TAGS = 'tagA' AND (region = 'apac' OR region = 'mea')"):
        expression = compile_sql92(text)
        non_matching = [i for i, p in enumerate(rows) if not expression.matches(p)]
        rejected = sum(1 for i in non_matching if not expression.prefilter.may_match_properties(raws[i]))
        assert rejected / len(non_matching) > 0.90, (text, rejected, len(non_matching))
        started = time.perf_counter()
        for raw in raws:
            expression.prefilter.may_match_properties(raw)
        scan_s = time.perf_counter() - started
        started = time.perf_counter()
        for raw in raws:
            expression.matches(_decode(raw))
        full_s = time.perf_counter() - started
        print(f"\n{text}: {len(non_matching)} non-matching, {rejected / len(non_matching):.1%} rejected "
              f"by the scan; scan {scan_s / len(raws) * 1e6:.2f} us/msg, decode+evaluate "
              f"{full_s / len(raws) * 1e6:.2f} us/msg")


def _decode(raw: bytes) -> dict[str, str]:
    from lakemq.common.message import string_to_properties

    return string_to_properties(raw.decode())
