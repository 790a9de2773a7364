"""Remoting frames as a connection reads them: the compiled decoder (lakemq.remoting._codec,
JSON headers) with its Python fallback (ROCKETMQ headers, odd JSON), fed in two pieces the
input chooses; every command it returns must decode the same through the pure Python
definition (codec._decode)."""

from __future__ import annotations

from typing import Final

from lakemq.errors import FrameError
from lakemq.remoting import codec
from lakemq.remoting.codec import FrameDecoder

ALLOWED: Final = (FrameError,)
MAX_FRAME: Final = 1 << 16


def one_input(data: bytes) -> None:
    cut = data[0] % len(data) if data else 0
    stream = data[1:]
    decoder = FrameDecoder(MAX_FRAME)
    commands = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
    pos = 0
    for command in commands:
        (length,) = codec._U32.unpack_from(stream, pos)
        frame = stream[pos + 4:pos + 4 + length]
        assert codec.decode_frame(frame) == command, (frame, command)
        pos += 4 + length
    assert decoder.buffered == len(stream) - pos
