"""The compiled codec (lakemq/remoting/_codec.pyx) against the Python codec it stands in for:
the same commands from the same bytes, the same bytes from the same commands, the same
errors; its layout names equal the Python side's; and what it does not take goes to Python."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.errors import FrameError
from lakemq.remoting import _codec, codec
from lakemq.remoting.codec import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    SerializeType,
)


def _python_frame(command: RemotingCommand) -> bytes:
    return b"".join(codec._encode_parts(command))


def _python_decode(frame: bytes) -> RemotingCommand:
    """A whole frame (length prefix included) through the Python decoder alone."""
    return codec._decode(frame, codec.FRAME_LENGTH_SIZE, len(frame))


def _outcome(decode, frame: bytes) -> RemotingCommand | str:
    try:
        return decode(frame)
    except FrameError:
        return "FrameError"


def _compiled_decode(frame: bytes) -> RemotingCommand:
    commands, end = _codec.decode_frames(frame, 0, 1 << 30)
    assert end == len(frame)
    [command] = commands
    return command


def _frame(header: bytes, body: bytes = b"") -> bytes:
    mark = len(header)  # type 0: JSON
    return (4 + len(header) + len(body)).to_bytes(4, "big") + mark.to_bytes(4, "big") + header + body


def test_layout_names_are_the_python_sides() -> None:
    compiled = _codec.layout()
    assert compiled == {
        "FRAME_LENGTH_SIZE": codec.FRAME_LENGTH_SIZE,
        "HEADER_MARK_SIZE": codec.HEADER_MARK_SIZE,
        "SERIALIZE_TYPE_SHIFT": codec.SERIALIZE_TYPE_SHIFT,
        "HEADER_LENGTH_MASK": codec._HEADER_LENGTH_MASK,
        "SERIALIZE_JSON": SerializeType.JSON,
        "SERIALIZE_ROCKETMQ": SerializeType.ROCKETMQ,
        "FLAG_RESPONSE": FLAG_RESPONSE,
        "FLAG_ONEWAY": FLAG_ONEWAY,
        "INT32_MAX": (1 << 31) - 1,
    }


# Text with what escaping must handle: quotes, backslashes, every control character, non-ASCII
# and astral characters (surrogate pairs on the wire when escaped); no lone surrogates.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)
ints = st.integers(-(1 << 31), (1 << 31) - 1)
commands = st.builds(
    RemotingCommand,
    code=ints,
    language=st.sampled_from(LanguageCode),
    version=ints,
    opaque=ints,
    flag=st.integers(0, 3),
    remark=st.one_of(st.none(), texts),
    ext_fields=st.dictionaries(texts, texts, max_size=6),
    body=st.binary(max_size=64),
    serialize_type=st.just(SerializeType.JSON),
)


@settings(max_examples=500, deadline=None)
@given(commands)
def test_encoding_is_byte_identical_and_decodes_back(command: RemotingCommand) -> None:
    python = _python_frame(command)
    assert _codec.encode_frame(command) == python
    head = _codec.encode_head(command)
    assert head is not None and head + command.body == python
    assert _compiled_decode(python) == _python_decode(python) == command


def test_what_the_compiled_encoder_does_not_take_goes_to_python() -> None:
    rocketmq = RemotingCommand(10, serialize_type=SerializeType.ROCKETMQ)
    surrogate = RemotingCommand(10, remark="\ud800")
    numeric_value = RemotingCommand(10, ext_fields={"a": 1})  # type: ignore[dict-item]
    unsigned = RemotingCommand(1 << 63)  # orjson writes up to 2^64 - 1
    for command in (rocketmq, numeric_value, unsigned):
        assert _codec.encode_frame(command) is None
        assert codec.encode(command) == _python_frame(command)
    for command in (surrogate, RemotingCommand(1 << 70)):
        assert _codec.encode_frame(command) is None
        with pytest.raises(FrameError):
            codec.encode(command)
    # An IntEnum code (RemotingCommand.request's callers) is written as its number.
    assert _codec.encode_frame(RemotingCommand(LanguageCode.GO)) == _python_frame(RemotingCommand(9))


_HEADERS = [
    b'{"code":10}',
    b' { "code" : 10 , "flag" : 1 } ',
    b'{"code":10,"extFields":null,"remark":null}',
    b'{"code":10,"extFields":{}}',
    b'{"code":10,"extFields":{"a":"\\u0001x\\u0002","b\\"":"\\\\\\/\\b\\f\\n\\r\\t"}}',
    b'{"code":10,"extFields":{"e":"\\ud83d\\ude00 \\u00e9 \xc3\xa9"}}',
    b'{"code":10,"extFields":{"a":null}}',
    b'{"code":10,"extFields":{"a":5,"b":true}}',
    b'{"code":10,"extFields":[]}',
    b'{"code":10,"language":"JAVA","serializeTypeCurrentRPC":"JSON","version":395}',
    b'{"code":10,"language":"KLINGON"}',
    b'{"code":10,"language":3}',
    b'{"code":10,"unknown":{"nested":1}}',
    b'{"code":10,"unknown":[1,2]}',
    b'{"code":10,"unknown":1.5,"other":false}',
    b'{"code":-1}',
    b'{"code":2147483648}',
    b'{"code":10.0}',
    b'{"code":1e3}',
    b'{"code":010}',
    b'{"code":true}',
    b'{"code":"10"}',
    b'{"flag":1}',
    b'{"code":10,"remark":"\\ud800"}',
    b'{"code":10,"remark":"\\udc00\\ud800"}',
    b'{"code":10,"remark":"a\x01b"}',
    b'{"code":10,"remark":"\xff"}',
    b'{"code":10,"remark":"\\x"}',
    b'{"code":10,"remark":"\\u12"}',
    b'{"code":10}}',
    b'{"code":10,}',
    b'{"code":10',
    b'{"c\\u006fde":10}',
    b'{"code":10,"code":11}',
    b'[]',
    b'',
    b'"x"',
]


@pytest.mark.parametrize("header", _HEADERS)
def test_odd_headers_decode_as_the_python_codec_decodes_them(header: bytes) -> None:
    frame = _frame(header, b"body")
    assert _outcome(_compiled_decode, frame) == _outcome(_python_decode, frame)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(1 << 40), 1 << 40), texts),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6)
header_dicts = st.fixed_dictionaries(
    {}, optional={"code": st.one_of(ints, json_values), "flag": st.one_of(st.integers(0, 3), json_values),
                  "opaque": ints, "version": ints, "language": st.one_of(st.sampled_from(list(LanguageCode.__members__)),
                                                                          json_values),
                  "remark": st.one_of(texts, json_values), "extFields": st.one_of(
                      st.dictionaries(texts, texts, max_size=4), st.dictionaries(texts, json_values, max_size=3),
                      json_values),
                  "serializeTypeCurrentRPC": st.just("JSON"), "other": json_values})


@settings(max_examples=600, deadline=None)
@given(header_dicts)
def test_generated_headers_decode_as_the_python_codec_decodes_them(header: dict[str, object]) -> None:
    frame = _frame(orjson.dumps(header))
    assert _outcome(_compiled_decode, frame) == _outcome(_python_decode, frame)


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=80))
def test_random_headers_decode_as_the_python_codec_decodes_them(header: bytes) -> None:
    frame = _frame(header)
    assert _outcome(_compiled_decode, frame) == _outcome(_python_decode, frame)


def test_decoder_uses_the_compiled_path_and_keeps_partial_frames() -> None:
    command = RemotingCommand(310, ext_fields={"a": "g"}, body=b"x" * 100, opaque=7)
    wire = codec.encode(command) * 3
    decoder = FrameDecoder()
    out = decoder.feed(wire[:150]) + decoder.feed(wire[150:])
    assert out == [command] * 3 and decoder.buffered == 0
    # Commands from the compiled decoder are the Python class, fields and all.
    assert type(out[0]) is RemotingCommand and out[0].language is LanguageCode.PYTHON
    assert out[0].serialize_type is SerializeType.JSON
