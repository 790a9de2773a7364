"""RemotingServer: accepts connections and hands their requests to registered processors.

A bad frame closes only the connection that sent it; everyone else keeps being served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from lakemq.remoting.codec import DEFAULT_MAX_FRAME_LENGTH
from lakemq.remoting.dispatch import Dispatcher, RequestProcessor
from lakemq.remoting.protocol import RemotingConnection

__all__ = ["DEFAULT_BACKLOG", "RemotingServer", "ServerConfig"]

log = logging.getLogger(__name__)

ConnectionListener = Callable[[RemotingConnection], None]


# RocketMQ's serverSocketBacklog: connections the kernel completes while the loop has not
# accepted them yet. asyncio's 100 overflows under a burst of clients, and each connect
# dropped then waits a second for its SYN to be sent again.
DEFAULT_BACKLOG = 1024


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """``listen_port`` 0 picks a free port (tests); ``listen_host`` defaults to loopback, set
    0.0.0.0 to serve other machines. ``backlog`` is capped by the kernel's
    ``net.core.somaxconn``."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH
    backlog: int = DEFAULT_BACKLOG
    # More ports served by the same processors, on the same host (a broker's VIP channel).
    extra_ports: tuple[int, ...] = ()


class RemotingServer:
    def __init__(self, config: ServerConfig = ServerConfig()) -> None:
        self.config = config
        self._dispatcher = Dispatcher()
        self._server: asyncio.Server | None = None
        self._extra: list[asyncio.Server] = []
        self._connections: set[RemotingConnection] = set()
        self._close_listeners: list[ConnectionListener] = []

    def register_processor(self, code: int, processor: RequestProcessor,
                           executor: Executor | None = None) -> None:
        self._dispatcher.register(code, processor, executor)

    def register_default_processor(self, processor: RequestProcessor,
                                   executor: Executor | None = None) -> None:
        self._dispatcher.register_default(processor, executor)

    def add_close_listener(self, listener: ConnectionListener) -> None:
        """Called on the loop when a connection closes (brokers and clients going away)."""
        self._close_listeners.append(listener)

    @property
    def connections(self) -> frozenset[RemotingConnection]:
        return frozenset(self._connections)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        return f"{self.config.listen_host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.config.listen_host, self.config.listen_port,
            reuse_address=True, backlog=self.config.backlog)
        for port in self.config.extra_ports:
            self._extra.append(await loop.create_server(
                self._new_connection, self.config.listen_host, port, reuse_address=True, backlog=self.config.backlog))
        log.info("remoting server listening on %s%s", self.address,
                 "".join(f" and :{s.sockets[0].getsockname()[1]}" for s in self._extra if s.sockets))

    async def shutdown(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for extra in self._extra:
            extra.close()
        for connection in list(self._connections):
            connection.close()
        await asyncio.gather(*(c.wait_closed() for c in list(self._connections)))
        await self._dispatcher.cancel_all()
        await self._server.wait_closed()
        for extra in self._extra:
            await extra.wait_closed()
        self._server = None
        self._extra = []

    def _new_connection(self) -> RemotingConnection:
        connection = RemotingConnection(
            self._dispatcher.on_request, max_frame_length=self.config.max_frame_length,
            reply_on_frame_error=True, on_close=self._connection_closed)
        self._connections.add(connection)
        return connection

    def _connection_closed(self, connection: RemotingConnection) -> None:
        self._connections.discard(connection)
        for listener in self._close_listeners:
            try:
                listener(connection)
            except Exception:
                log.exception("close listener failed for %s", connection.remote_addr)
