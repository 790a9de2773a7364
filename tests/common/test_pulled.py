"""Pulled records decoded in C (lakemq/common/_pulled.pyx through decode_pull_result) against
the Python decoding it stands in for (iter_records and decode_pull_result's loop): the same
messages, field for field, or the same FrameError, for well-formed and damaged responses."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.client import pull_api
from lakemq.client.client_api import RawPullResult
from lakemq.client.results import PullResult, PullStatus
from lakemq.common.message import MessageConst, MessageSysFlag, properties_to_string
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import BLANK_MAGIC_CODE, create_message_id, decode_pulled, encode_record
from lakemq.errors import FrameError
from lakemq.filter import parse_subscription

MQ = MessageQueue("T", "b", 0)
texts = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
properties = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a", "é"]) | texts, texts,
                             max_size=5)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=64))
    sys_flag = draw(st.sampled_from([0, 0, MessageSysFlag.COMPRESSED_FLAG, 0x8]))
    if sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        body = zlib.compress(body)
    props = draw(properties)
    raw_props = properties_to_string(props).encode()
    if draw(st.integers(0, 9)) == 0:  # now and then not UTF-8, or a pair without its separator
        raw_props += draw(st.sampled_from([b"\xff\x01x\x02", b"name-only\x02", b"k\x01\xc3\x02"]))
    return bytes(encode_record(
        topic=draw(st.sampled_from([b"T", b"Topic-2", "é".encode()])), queue_id=draw(st.integers(0, 7)), body=body,
        flag=draw(st.integers(-(1 << 31), (1 << 31) - 1)), properties=raw_props, sys_flag=sys_flag,
        born_timestamp=draw(st.integers(0, 1 << 45)), born_host=(bytes([10, 0, 0, draw(st.integers(0, 3))]), 40000),
        store_host=(b"\x7f\x00\x00\x01", 10911), reconsume_times=draw(st.integers(0, 20)),
        queue_offset=draw(st.integers(0, 1 << 40)), physical_offset=draw(st.integers(0, 1 << 40)),
        store_timestamp=draw(st.integers(0, 1 << 45))))


def _python(raw: RawPullResult, expression: str, monkeypatch: pytest.MonkeyPatch) -> PullResult | str:
    with monkeypatch.context() as m:
        m.setattr(pull_api, "decode_pulled", lambda *args: None)  # what the compiled path does not take
        return _outcome(raw, expression)


def _outcome(raw: RawPullResult, expression: str) -> PullResult | str:
    try:
        return pull_api.decode_pull_result(MQ, raw, parse_subscription("T", expression))
    except FrameError:
        return "FrameError"


def _raw(body: bytes) -> RawPullResult:
    return RawPullResult(PullStatus.FOUND, 7, 0, 99, 0, body)


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), max_size=6), st.sampled_from(["*", "TAGS", "a || é", ""]), st.data())
def test_compiled_and_python_decoding_agree(recs: list[bytes], expression: str, data: st.DataObject) -> None:
    body = b"".join(recs)
    tail = data.draw(st.sampled_from([b"", BLANK_MAGIC_CODE.to_bytes(8, "big"), b"\x00\x01", b"junk-junk-junk"]))
    raw = _raw(body + tail)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(raw, expression) == _python(raw, expression, monkeypatch)


@settings(max_examples=300, deadline=None)
@given(records(), st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_damaged_records_decode_as_python_decodes_them(record: bytes, at: int, junk: bytes) -> None:
    at = min(at, len(record))
    raw = _raw(record[:at] + junk + record[at + len(junk):])
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(raw, "*") == _python(raw, "*", monkeypatch)


def test_the_compiled_decoder_sets_what_a_consumer_reads() -> None:
    props = {MessageConst.TAGS: "a", MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "U1"}
    rec = bytes(encode_record(topic=b"T", queue_id=1, body=b"hi", flag=0, properties=properties_to_string(props)
                              .encode(), sys_flag=0, born_timestamp=1, born_host=(b"\x0a\x00\x00\x01", 1),
                              store_host=(b"\x7f\x00\x00\x01", 10911), physical_offset=4096))
    [msg] = decode_pulled(rec, None, "0", "99", MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET) or []
    assert msg.msg_id == "U1" and msg.body == b"hi" and msg.born_host == "10.0.0.1:1"
    assert msg.properties == {**props, MessageConst.MIN_OFFSET: "0", MessageConst.MAX_OFFSET: "99"}
    assert decode_pulled(rec, frozenset({"b"}), "0", "99", MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET) == []
    props.pop(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    rec2 = bytes(encode_record(topic=b"T", queue_id=1, body=b"hi", flag=0,
                               properties=properties_to_string(props).encode(), sys_flag=0, born_timestamp=1,
                               born_host=(b"\x0a\x00\x00\x01", 1), store_host=(b"\x7f\x00\x00\x01", 10911),
                               physical_offset=4096))
    [msg2] = decode_pulled(rec2, None, "0", "99", MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET) or []
    assert msg2.msg_id == create_message_id(b"\x7f\x00\x00\x01", 10911, 4096)
