"""FrameDecoder under random input: it returns commands or raises FrameError, nothing else,
and never waits for more bytes than a frame's length announces."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.errors import FrameError
from lakemq.remoting.codec import FrameDecoder, LanguageCode, RemotingCommand, SerializeType, encode

LIMIT = 4096

texts = st.text(max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(1 << 15), (1 << 15) - 1),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-(1 << 15), (1 << 15) - 1),
    opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(0, 3),
    remark=st.one_of(st.none(), texts.filter(bool)),
    ext_fields=st.dictionaries(texts, texts, max_size=5),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(SerializeType),
)


def _feed_all(decoder: FrameDecoder, data: bytes, chunk: int) -> list[RemotingCommand]:
    out: list[RemotingCommand] = []
    for i in range(0, len(data), chunk):
        out += decoder.feed(data[i:i + chunk])
    return out


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512), st.integers(1, 64))
def test_random_bytes_only_raise_frame_error(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_length=LIMIT)
    try:
        _feed_all(decoder, data, chunk)
    except FrameError:
        return
    # Whatever is left is an incomplete frame still within its announced, allowed length.
    assert decoder.buffered < LIMIT


@settings(max_examples=300, deadline=None)
@given(st.lists(commands, min_size=1, max_size=4), st.integers(1, 97))
def test_valid_streams_roundtrip_in_any_chunking(cmds: list[RemotingCommand], chunk: int) -> None:
    wire = b"".join(encode(c) for c in cmds)
    assert _feed_all(FrameDecoder(), wire, chunk) == cmds


@settings(max_examples=300, deadline=None)
@given(commands, st.data())
def test_truncated_frame_waits_then_completes(cmd: RemotingCommand, data: st.DataObject) -> None:
    wire = encode(cmd)
    cut = data.draw(st.integers(0, len(wire) - 1))
    decoder = FrameDecoder()
    assert decoder.feed(wire[:cut]) == []
    assert decoder.feed(wire[cut:]) == [cmd]


@settings(max_examples=300, deadline=None)
@given(commands, st.data())
def test_corrupted_header_bytes_only_raise_frame_error(cmd: RemotingCommand, data: st.DataObject) -> None:
    wire = bytearray(encode(cmd))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(4, len(wire) - 1))
        wire[pos] = data.draw(st.integers(0, 255))
    try:
        FrameDecoder().feed(bytes(wire))
    except FrameError:
        pass


@given(st.integers(LIMIT - 3, 0xFFFFFFFF))
def test_oversized_lengths_refused_immediately(length: int) -> None:
    decoder = FrameDecoder(max_frame_length=LIMIT)
    try:
        decoder.feed(struct.pack(">I", length))
    except FrameError as exc:
        assert "exceeds" in str(exc)
    else:
        raise AssertionError(f"length {length} was accepted")
