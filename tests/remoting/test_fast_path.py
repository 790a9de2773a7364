"""The remoting hot path: orjson headers byte for byte as the stdlib writer (fastjson's form,
which the C++ and Java clients parse), frames decoded straight from a read and across reads,
generated header codecs, and a server and client on uvloop."""

from __future__ import annotations

import asyncio
import json
import random
import struct
import time

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import FrameError, RemotingCommandError
from lakemq.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestContext,
    ServerConfig,
    event_loop,
)
from lakemq.remoting.codec import FrameDecoder, LanguageCode, SerializeType, encode, encode_parts
from lakemq.remoting.headers import (
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    decode_header,
    decode_send_header,
    encode_header,
    encode_send_header_v2,
)

pytestmark = pytest.mark.timeout(60)

# Control characters, separators RocketMQ puts in properties, non-ASCII, astral, quotes.
_CHARS = [chr(i) for i in range(0x300)] + ["\u2028", "\u2029", "\ufeff", "\U0001F600", "\U0010FFFF"]


def _stdlib_header(cmd: RemotingCommand) -> bytes:
    """The header as lakemq wrote it with the json module before orjson (fastjson's form)."""
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    header.update(flag=cmd.flag, language=cmd.language.name, opaque=cmd.opaque)
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header.update(serializeTypeCurrentRPC="JSON", version=cmd.version)
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def test_orjson_header_is_byte_identical_to_the_stdlib_form() -> None:
    rng = random.Random(7)
    for n in range(3000):
        text = "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 10)))
        cmd = RemotingCommand(code=n % 400, opaque=n, flag=n % 4, remark=text if n % 3 else None,
                              ext_fields={text or "k": text, "PROPERTIES": f"KEYS\x01{text}\x02"},
                              language=LanguageCode(n % 14))
        head, body = encode_parts(cmd)
        assert head[8:] == _stdlib_header(cmd)
        assert body == b""


def test_frames_split_and_coalesced_decode_the_same() -> None:
    cmds = [RemotingCommand(code=i, opaque=i, ext_fields={"a": str(i)}, body=bytes([i]) * i)
            for i in range(1, 40)]
    wire = b"".join(encode(c) for c in cmds)
    for chunk in (1, 3, 17, 100, len(wire)):
        decoder = FrameDecoder()
        got = [c for i in range(0, len(wire), chunk) for c in decoder.feed(wire[i:i + chunk])]
        assert got == cmds
        assert decoder.buffered == 0
    # A frame left half-read is completed by the next read and decoded once.
    decoder = FrameDecoder()
    assert decoder.feed(wire[:len(encode(cmds[0])) + 5]) == cmds[:1]
    assert decoder.buffered == 5
    assert decoder.feed(wire[len(encode(cmds[0])) + 5:]) == cmds[1:]
    # Bodies are independent bytes, not views into the read buffer.
    assert all(type(c.body) is bytes for c in got)


def test_bad_rocketmq_header_split_over_reads_is_a_frame_error() -> None:
    wire = bytearray(encode(RemotingCommand(code=1, serialize_type=SerializeType.ROCKETMQ,
                                            ext_fields={"a": "b"})))
    wire[-3] = 0xFF  # the extFields value length now overruns the header
    decoder = FrameDecoder()
    assert decoder.feed(bytes(wire[:5])) == []
    with pytest.raises(FrameError, match="truncated"):
        decoder.feed(bytes(wire[5:]))
    with pytest.raises(FrameError):  # the stream stays failed
        decoder.feed(b"\0")


def test_odd_but_valid_json_headers_take_the_checked_path() -> None:
    header = b'{"code":10,"extFields":{"n":5,"b":true,"gone":null},"language":"GO","opaque":2}'
    frame = struct.pack(">I", len(header)) + header
    cmd = FrameDecoder().feed(struct.pack(">I", len(frame)) + frame)[0]
    assert cmd.ext_fields == {"n": "5", "b": "true"}
    assert (cmd.language, cmd.opaque, cmd.flag, cmd.version) == (LanguageCode.GO, 2, 0, 0)
    for bad, what in ((b'{"code":1.5}', "code"), (b'{"code":1,"opaque":4294967296}', "opaque"),
                      (b'{"code":1,"remark":3}', "remark"), (b'{"code":1,"extFields":[1]}', "extFields"),
                      (b'{"code":1,"extFields":{"a":[]}}', "extFields"), (b"[1]", "object"),
                      (b'{"code":NaN}', "JSON")):
        frame = struct.pack(">I", len(bad)) + bad
        with pytest.raises(FrameError, match=what):
            FrameDecoder().feed(struct.pack(">I", len(frame)) + frame)


def test_generated_header_codecs() -> None:
    header = SendMessageRequestHeader("pg", "T", "TBW102", 4, 3, 0, 1700000000000, 0, "TAGS\x01a\x02",
                                      reconsume_times=2, batch=True)
    fields = encode_send_header_v2(header)
    assert fields == {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000",
                      "h": "0", "i": "TAGS\x01a\x02", "j": "2", "m": "true"}
    assert decode_send_header(RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=fields)) == header
    v1 = RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=encode_header(header))
    assert decode_send_header(v1) == header
    # Absent optional fields take the dataclass default, not None; the C++ client's "1" is true.
    reg = decode_header(RegisterBrokerRequestHeader, {
        "brokerName": "b", "brokerAddr": "h:1", "clusterName": "c", "haServerAddr": "", "brokerId": "0",
        "compressed": "1"})
    assert (reg.compressed, reg.body_crc32, reg.heartbeat_timeout_millis) == (True, 0, None)
    with pytest.raises(RemotingCommandError, match="<brokerId> is null"):
        decode_header(RegisterBrokerRequestHeader, {"brokerName": "b", "brokerAddr": "h", "clusterName": "c",
                                                    "haServerAddr": ""})
    with pytest.raises(RemotingCommandError, match="brokerId: expected a number"):
        decode_header(RegisterBrokerRequestHeader, {"brokerName": "b", "brokerAddr": "h", "clusterName": "c",
                                                    "haServerAddr": "", "brokerId": "x"})


class _Echo:
    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, asyncio.get_running_loop().__class__.__module__,
                             dict(request.ext_fields), request.body)

    def reject_request(self) -> bool:
        return False


def test_server_and_client_on_uvloop() -> None:
    pytest.importorskip("uvloop", reason="uvloop has no build for this platform")

    async def main() -> None:
        server = RemotingServer(ServerConfig(listen_port=0))
        server.register_processor(RequestCode.SEND_MESSAGE, _Echo())
        await server.start()
        client = RemotingClient()
        try:
            big = bytes(range(256)) * 1024  # past the size written after its header, not joined
            answers = await asyncio.gather(*(
                client.invoke(server.address, RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, {"i": str(i)}, big if i % 2 else b"x" * i), 5.0)
                for i in range(64)))
            for i, answer in enumerate(answers):
                assert answer.code == ResponseCode.SUCCESS
                assert answer.remark == "uvloop"  # the processor ran on uvloop's loop
                assert answer.ext_fields == {"i": str(i)}
                assert answer.body == (big if i % 2 else b"x" * i)
        finally:
            await client.shutdown()
            await server.shutdown()

    assert event_loop.loop_name() == "uvloop"
    started = time.monotonic()
    event_loop.run(main())
    assert time.monotonic() - started < 30
