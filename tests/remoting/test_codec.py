"""Golden bytes for both header serializations, built by hand from the frame format."""

from __future__ import annotations

import struct

import pytest

from lakemq.errors import FrameError
from lakemq.remoting.codec import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
)


def _frame(kind: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", 4 + len(header) + len(body)) + bytes([kind]) + \
        len(header).to_bytes(3, "big") + header + body


JSON_HEADER = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"PYTHON",'
               b'"opaque":7,"serializeTypeCurrentRPC":"JSON","version":401}')


def test_json_request_golden_bytes() -> None:
    cmd = RemotingCommand.request(105, {"topic": "TopicTest"})
    cmd.opaque = 7
    assert encode(cmd) == _frame(0, JSON_HEADER)


def test_json_response_with_remark_and_body_golden_bytes() -> None:
    request = RemotingCommand.request(105, {"topic": "T"})
    request.opaque = 9
    response = request.reply(17, remark="no route")
    response.body = b"xyz"
    header = (b'{"code":17,"flag":1,"language":"PYTHON","opaque":9,"remark":"no route",'
              b'"serializeTypeCurrentRPC":"JSON","version":401}')
    assert encode(response) == _frame(0, header, b"xyz")


def test_decode_cpp_client_header() -> None:
    # What rocketmq-client-cpp 2.0 writes: jsoncpp FastWriter (trailing newline), empty
    # credential fields, language CPP, a plain 4-byte header length.
    header = (b'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
              b'"topic":"TopicTest"},"flag":0,"language":"CPP","opaque":3,"remark":"",'
              b'"version":295}\n')
    cmd = decode_frame(_frame(0, header)[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (105, LanguageCode.CPP, 295, 3)
    assert cmd.ext_fields["topic"] == "TopicTest"
    assert cmd.remark == ""
    assert cmd.serialize_type == SerializeType.JSON
    assert not cmd.is_response and not cmd.is_oneway


def test_rocketmq_header_golden_bytes() -> None:
    cmd = RemotingCommand(code=310, language=LanguageCode.JAVA, version=401, opaque=258,
                          flag=FLAG_ONEWAY, remark="hi", ext_fields={"a": "g1", "bb": ""},
                          body=b"\x00\x01", serialize_type=SerializeType.ROCKETMQ)
    header = (b"\x01\x36" b"\x00" b"\x01\x91" b"\x00\x00\x01\x02" b"\x00\x00\x00\x02"
              b"\x00\x00\x00\x02hi"
              + struct.pack(">i", 2 + 1 + 4 + 2 + 2 + 2 + 4)
              + b"\x00\x01a\x00\x00\x00\x02g1" b"\x00\x02bb\x00\x00\x00\x00")
    wire = encode(cmd)
    assert wire == _frame(1, header, b"\x00\x01")
    back = decode_frame(wire[4:])
    assert back == cmd


def test_response_keeps_request_serialization() -> None:
    request = RemotingCommand(code=11, serialize_type=SerializeType.ROCKETMQ, opaque=5)
    response = request.reply(0)
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert response.flag == FLAG_RESPONSE and response.opaque == 5
    assert encode(response)[4] == 1


def test_roundtrip_unicode_and_empty() -> None:
    for kind in SerializeType:
        cmd = RemotingCommand(code=0, remark="ümlaut ✓", ext_fields={"k€y": "välue"},
                              body=b"", serialize_type=kind)
        assert decode_frame(encode(cmd)[4:]) == cmd


def test_decoder_splits_stream_byte_by_byte() -> None:
    a = RemotingCommand.request(34, body=b"hb")
    b = RemotingCommand.request(105, {"topic": "x"})
    b.opaque = 2
    wire = encode(a) + encode(b)
    decoder = FrameDecoder()
    out = []
    for i in range(len(wire)):
        out += decoder.feed(wire[i:i + 1])
    assert out == [a, b]
    assert decoder.buffered == 0


@pytest.mark.parametrize("frame, message", [
    (_frame(2, b"{}"), "serialization type"),
    (_frame(0, b"[1]"), "not an object"),
    (_frame(0, b'{"code":"x"}'), "integer"),
    (_frame(0, b'{"code":1,"extFields":[]}'), "extFields"),
    (_frame(0, b'{"code":1,"remark":5}'), "remark"),
    (_frame(0, b"{bad"), "JSON"),
    (_frame(1, b"\x00\x01"), "truncated"),
    (_frame(1, b"\x00" * 13 + b"\x00\x00\x00\x09"), "truncated"),
    (struct.pack(">II", 5, 9) + b"x", "exceeds"),
    (struct.pack(">I", 2) + b"ab", "shorter"),
])
def test_malformed_frames_raise_frame_error(frame: bytes, message: str) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match=message):
        decoder.feed(frame)
    with pytest.raises(FrameError):
        decoder.feed(b"")


def test_oversized_frame_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder(max_frame_length=1024)
    with pytest.raises(FrameError, match="exceeds the limit"):
        decoder.feed(struct.pack(">I", 1021))
    assert FrameDecoder(max_frame_length=1024).feed(struct.pack(">I", 1020)) == []
