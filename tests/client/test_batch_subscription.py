import pytest

from lakemq.client.subscription import build_subscription, tag_matches
from lakemq.common.message import Message, MessageExt, string_to_properties, tags_hash_code
from lakemq.common.message_batch import decode_batch, encode_messages
from lakemq.common.subscription import ExpressionType
from lakemq.errors import MessageIllegalError


def test_batch_golden_bytes() -> None:
    m1 = Message("T", b"hi", 7, {"TAGS": "a"})
    m2 = Message("T", b"", 0, {})
    data = encode_messages([m1, m2])
    props = b"TAGS\x01a\x02"
    expected = (
        (22 + 2 + len(props)).to_bytes(4, "big") + bytes(8) + (7).to_bytes(4, "big")
        + (2).to_bytes(4, "big") + b"hi" + len(props).to_bytes(2, "big") + props
        + (22).to_bytes(4, "big") + bytes(8) + bytes(4) + bytes(4) + bytes(2)
    )
    assert data == expected
    back = [Message("T", e.body, e.flag, string_to_properties(e.properties)) for e in decode_batch(data)]
    assert back == [m1, m2]


def test_batch_rejects_bad_input() -> None:
    with pytest.raises(MessageIllegalError):
        encode_messages([Message("T", b"", 0, {"K": "v" * 40000})])
    data = encode_messages([Message("T", b"abc")])
    with pytest.raises(MessageIllegalError):
        decode_batch(data[:-1])
    with pytest.raises(MessageIllegalError):
        decode_batch(b"\x00\x00\x00\x05" + data[4:])


def msg(tags: str | None) -> MessageExt:
    m = MessageExt("T")
    m.tags = tags
    return m


def test_tag_expression_and_recheck() -> None:
    sub = build_subscription("T", " a || b ||")
    assert sub.tags_set == {"a", "b"} and sub.code_set == {tags_hash_code("a"), tags_hash_code("b")}
    assert tag_matches(sub, msg("a")) and tag_matches(sub, msg("b"))
    assert not tag_matches(sub, msg("c")) and not tag_matches(sub, msg(None))
    # "Aa" and "BB" share a Java hash code: the broker's filter lets both through, the client drops one
    assert tags_hash_code("Aa") == tags_hash_code("BB")
    assert not tag_matches(build_subscription("T", "Aa"), msg("BB"))
    for everything in (None, "", "*", " * "):
        s = build_subscription("T", everything)
        assert s.sub_all and tag_matches(s, msg("zzz"))
    sql = build_subscription("T", "a > 1", ExpressionType.SQL92)
    assert tag_matches(sql, msg("whatever"))
    with pytest.raises(ValueError):
        build_subscription("T", "||")
    assert sub.to_json()["tagsSet"] == ["a", "b"] and sub.to_json()["expressionType"] == "TAG"
