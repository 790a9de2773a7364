"""RemotingClient: one connection per ``host:port``, opened on first use and again after it
breaks, plus the name server list with failover.

Name servers are tried starting from the one that answered last; a connect failure or a
timeout moves to the next, as RocketMQ's client does. Requests a server sends to the client
(CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED) go to processors registered here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from lakemq.errors import RemotingConnectError, RemotingError, RemotingTimeoutError
from lakemq.remoting.codec import DEFAULT_MAX_FRAME_LENGTH, RemotingCommand
from lakemq.remoting.dispatch import Dispatcher, RequestProcessor
from lakemq.remoting.protocol import RemotingConnection

__all__ = ["RemotingClient", "RemotingClientConfig", "parse_addr"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RemotingClientConfig:
    connect_timeout: float = 3.0
    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r}, expected host:port")
    return host, int(port)


class RemotingClient:
    def __init__(self, config: RemotingClientConfig | None = None,
                 namesrv_addrs: Sequence[str] | str = ()) -> None:
        self.config = config if config is not None else RemotingClientConfig()
        self._dispatcher = Dispatcher()
        self._connections: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._namesrv_addrs: list[str] = []
        self._namesrv_index = 0
        self.update_namesrv_addrs(namesrv_addrs)

    # server -> client requests

    def register_processor(self, code: int, processor: RequestProcessor,
                           executor: Executor | None = None) -> None:
        self._dispatcher.register(code, processor, executor)

    # name servers

    @property
    def namesrv_addrs(self) -> tuple[str, ...]:
        return tuple(self._namesrv_addrs)

    def update_namesrv_addrs(self, addrs: Sequence[str] | str) -> None:
        """Accepts a list or RocketMQ's ``"host:port;host:port"`` string."""
        items = addrs.split(";") if isinstance(addrs, str) else list(addrs)
        cleaned = [a.strip() for a in items if a.strip()]
        for addr in cleaned:
            parse_addr(addr)
        if cleaned != self._namesrv_addrs:
            self._namesrv_addrs = cleaned
            # Spread clients over the name servers, as RocketMQ's random start index does.
            self._namesrv_index = random.randrange(len(cleaned)) if cleaned else 0

    async def invoke_namesrv(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send to a name server, failing over to the next on connect errors and timeouts."""
        if not self._namesrv_addrs:
            raise RemotingConnectError("no name server address set")
        last_error: RemotingError | None = None
        count = len(self._namesrv_addrs)
        for step in range(count):
            index = (self._namesrv_index + step) % count
            addr = self._namesrv_addrs[index]
            try:
                # Each attempt gets its own opaque; the caller's command stays as given.
                attempt = dataclasses.replace(request, ext_fields=dict(request.ext_fields))
                response = await self.invoke(addr, attempt, timeout)
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                log.warning("name server %s failed: %s", addr, exc)
                last_error = exc
                continue
            self._namesrv_index = index
            return response
        assert last_error is not None
        raise last_error

    # invocation

    async def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` to ``addr`` and wait at most ``timeout`` seconds (connect included)."""
        connection = self._connections.get(addr)
        if connection is None or not connection.is_open:  # connect first, within the timeout
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            connection = await self._connection(addr, timeout)
            timeout = max(deadline - loop.time(), 0.0)
        try:
            return await connection.invoke(request, timeout)
        except RemotingConnectError:
            self._drop(addr, connection)
            raise

    async def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        connection = await self._connection(addr, timeout)
        await connection.invoke_oneway(request)

    async def close_connection(self, addr: str) -> None:
        connection = self._connections.pop(addr, None)
        if connection is not None:
            connection.close()
            await connection.wait_closed()

    async def shutdown(self) -> None:
        for addr in list(self._connections):
            await self.close_connection(addr)
        await self._dispatcher.cancel_all()

    async def _connection(self, addr: str, timeout: float) -> RemotingConnection:
        connection = self._connections.get(addr)
        if connection is not None and connection.is_open:
            return connection
        lock = self._connecting.setdefault(addr, asyncio.Lock())
        async with lock:
            connection = self._connections.get(addr)
            if connection is not None and connection.is_open:
                return connection
            connection = await self._connect(addr, min(timeout, self.config.connect_timeout))
            self._connections[addr] = connection
            return connection

    async def _connect(self, addr: str, timeout: float) -> RemotingConnection:
        host, port = parse_addr(addr)
        loop = asyncio.get_running_loop()

        def factory() -> RemotingConnection:
            return RemotingConnection(self._dispatcher.on_request,
                                      max_frame_length=self.config.max_frame_length,
                                      on_close=lambda c: self._drop(addr, c))
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(factory, host, port)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {timeout:.3f}s") from None
        except OSError as exc:
            raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
        log.info("connected to %s", addr)
        return connection

    def _drop(self, addr: str, connection: RemotingConnection) -> None:
        if self._connections.get(addr) is connection:
            del self._connections[addr]

