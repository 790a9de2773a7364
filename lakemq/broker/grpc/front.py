"""Plaintext and TLS gRPC on one port (``grpcTlsMode=permissive``, RocketMQ's proxy default).

grpcio serves either on a port, not both, so a small asyncio front owns ``grpcListenPort``:
it peeks at each new connection's first byte (0x16 opens a TLS handshake; an HTTP/2 preface
starts with "P"), ends TLS itself where there is one (ALPN h2), and relays the bytes both ways
to grpcio's plaintext listener on a loopback port of its own. The broker still sees who called:
the front records which loopback port each relay came from, and the server maps the peer
grpcio reports back to the client's address (for the ACL's white lists and born hosts).

A connection that sends nothing for ``FIRST_BYTE_TIMEOUT`` is closed. The relay honours flow
control both ways (a side that cannot keep up pauses reading from the other).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Final

__all__ = ["PortFront"]

log = logging.getLogger(__name__)

FIRST_BYTE_TIMEOUT: Final = 30.0
_TLS_HANDSHAKE: Final = 0x16


class _Pipe(asyncio.Protocol):
    """One side of a relay; bytes that arrive before the other side is linked wait here."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: _Pipe | None = None
        self._early: list[bytes] = []
        self._closed = False
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport

    def link(self, other: _Pipe) -> None:
        self.other = other
        for data in self._early:
            other.write(data)
        self._early.clear()
        if self._closed:
            other.close()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.other is None:
            self._early.append(data)
        else:
            self.other.write(data)

    def eof_received(self) -> bool | None:
        if self.other is not None and self.other.transport is not None and self.other.transport.can_write_eof():
            self.other.transport.write_eof()
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.other is not None:
            self.other.close()
        if not self.lost.done():
            self.lost.set_result(None)

    # The other side's reading pauses while this side's writes back up.
    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()


class PortFront:
    def __init__(self, host: str, port: int, backend_port: int, context: ssl.SSLContext) -> None:
        self._host = host
        self._port = port
        self._backend_port = backend_port
        self._context = context
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._pipes: set[_Pipe] = set()
        # loopback port of a relay to grpcio -> the client's "host:port"
        self.clients: dict[int, str] = {}
        self.port = 0

    async def start(self) -> None:
        listener = socket.create_server((self._host, self._port), backlog=1024)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._accepting = asyncio.get_running_loop().create_task(self._accept(), name="grpc-front")

    def peer(self, grpc_peer_addr: str) -> str:
        """The client behind a relay's loopback address (else the address itself)."""
        host, _, port = grpc_peer_addr.rpartition(":")
        if host == "127.0.0.1" and port.isdigit():
            return self.clients.get(int(port), grpc_peer_addr)
        return grpc_peer_addr

    async def shutdown(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for pipe in list(self._pipes):
            pipe.close()

    async def _accept(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            sock, addr = await loop.sock_accept(self._listener)
            task = loop.create_task(self._serve(sock, f"{addr[0]}:{addr[1]}"))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, sock: socket.socket, client: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            first = await asyncio.wait_for(self._first_byte(sock), FIRST_BYTE_TIMEOUT)
            if first is None:
                sock.close()
                return
            # The pipes are made here: uvloop may call connection_made after the call returns,
            # and answers an SSL socket's protocol with its own SSLProtocol.
            up, down = _Pipe(), _Pipe()
            up_transport, _ = await loop.create_connection(lambda: up, "127.0.0.1", self._backend_port)
            up.transport = up_transport
            relay_port = up_transport.get_extra_info("sockname")[1]
            self.clients[relay_port] = client
            tls = self._context if first == _TLS_HANDSHAKE else None
            down.transport, _ = await loop.connect_accepted_socket(lambda: down, sock, ssl=tls)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            log.info("gRPC connection from %s dropped before it was relayed: %s", client, exc)
            sock.close()
            return
        self._pipes.update((up, down))
        down.link(up)
        up.link(down)
        try:
            await asyncio.wait((up.lost, down.lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            up.close()
            down.close()
            self.clients.pop(relay_port, None)
            self._pipes.difference_update((up, down))

    @staticmethod
    async def _first_byte(sock: socket.socket) -> int | None:
        """The connection's first byte, left in the socket (None: closed before sending)."""
        loop = asyncio.get_running_loop()
        readable = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(sock.fileno(), ready)
        try:
            await readable
        finally:
            loop.remove_reader(sock.fileno())
        peeked = sock.recv(1, socket.MSG_PEEK)
        return peeked[0] if peeked else None
