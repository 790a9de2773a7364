"""Requests pipelined into one read are all answered, in order, with one write for the answers
made while handling that read (over a real loopback socket; the server's transport counted)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import (
    RemotingCommand,
    RemotingServer,
    RequestContext,
    ServerConfig,
    decode_frame,
    encode,
)
from lakemq.remoting.protocol import RemotingConnection

pytestmark = pytest.mark.timeout(30)


class Inline:
    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, body=request.body)

    def reject_request(self) -> bool:
        return False


class CountingTransport:
    """The server connection's transport, with its write calls counted."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.writes, self.writelines_calls = inner, 0, 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.inner.write(data)

    def writelines(self, parts: Any) -> None:
        self.writelines_calls += 1
        self.inner.writelines(parts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _read_frames(sock: socket.socket, count: int) -> list[RemotingCommand]:
    buf, out = b"", []
    while len(out) < count:
        chunk = sock.recv(1 << 16)
        assert chunk, "server closed the connection"
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            size = int.from_bytes(buf[:4], "big")
            out.append(decode_frame(buf[4:4 + size]))
            buf = buf[4 + size:]
    return out


async def test_one_read_many_requests_one_write() -> None:
    server = RemotingServer(ServerConfig(listen_port=0))
    server.register_processor(RequestCode.HEART_BEAT, Inline())
    await server.start()
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        # The first request makes the connection; then wrap its transport to count writes.
        first = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"0")
        first.opaque = 1
        await loop.run_in_executor(None, sock.sendall, encode(first))
        assert (await loop.run_in_executor(None, _read_frames, sock, 1))[0].body == b"0"
        [connection] = server.connections
        assert isinstance(connection, RemotingConnection)
        counting = CountingTransport(connection._transport)
        connection._transport = counting  # type: ignore[assignment]

        requests = []
        for n in range(2, 42):
            request = RemotingCommand.request(RequestCode.HEART_BEAT, body=str(n).encode() * 300)
            request.opaque = n
            requests.append(encode(request))
        await loop.run_in_executor(None, sock.sendall, b"".join(requests))
        answers = await loop.run_in_executor(None, _read_frames, sock, 40)
        assert [a.opaque for a in answers] == list(range(2, 42))
        assert all(a.code == ResponseCode.SUCCESS and a.body == str(a.opaque).encode() * 300 for a in answers)
        # 40 answers in at most as many writes as the reads the kernel split them into (a
        # 24 KB burst arrives in a few reads), not one write per answer.
        assert counting.writes + counting.writelines_calls < 10
        assert counting.writelines_calls >= 1
    finally:
        sock.close()
        await server.shutdown()
