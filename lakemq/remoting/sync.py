"""A blocking face over RemotingClient for scripts and the CLI: the client lives on an event
loop in a daemon thread and every call waits for its result there."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, Self, TypeVar

from lakemq.remoting.client import RemotingClient, RemotingClientConfig
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.event_loop import new_event_loop

__all__ = ["SyncRemotingClient"]

T = TypeVar("T")


class SyncRemotingClient:
    def __init__(self, config: RemotingClientConfig | None = None,
                 namesrv_addrs: Sequence[str] | str = ()) -> None:
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lakemq-remoting",
                                        daemon=True)
        self._thread.start()
        self.client = RemotingClient(config, namesrv_addrs)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return self._call(self.client.invoke(addr, request, timeout))

    def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> None:
        self._call(self.client.invoke_oneway(addr, request, timeout))

    def invoke_namesrv(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return self._call(self.client.invoke_namesrv(request, timeout))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self.client.shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
