"""BlockingConnection against a real RemotingServer on loopback: it answers a request with its
own response, drops a late answer to an earlier request, times out without losing the
connection, and turns a closed peer into RemotingConnectError."""

from __future__ import annotations

import asyncio
import select
import threading
from collections.abc import Iterator

import pytest

from lakemq.errors import RemotingConnectError, RemotingTimeoutError
from lakemq.remoting import RemotingCommand, RemotingServer
from lakemq.remoting.blocking import BlockingConnection
from lakemq.remoting.dispatch import RequestContext


class _Echo:
    """Answers code 1 at once with the request's body, code 2 after 0.3 s."""

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if request.code == 2:
            await asyncio.sleep(0.3)
        return request.reply(0, None, {"echo": request.ext_fields.get("k", "")}, request.body)


@pytest.fixture
def server() -> Iterator[tuple[str, asyncio.AbstractEventLoop, RemotingServer]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    remoting = RemotingServer()
    remoting.register_default_processor(_Echo())
    asyncio.run_coroutine_threadsafe(remoting.start(), loop).result(10)
    try:
        yield remoting.address, loop, remoting
    finally:
        asyncio.run_coroutine_threadsafe(remoting.shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_answers_timeouts_and_a_closed_peer(server: tuple[str, asyncio.AbstractEventLoop, RemotingServer]) -> None:
    addr, loop, remoting = server
    connection = BlockingConnection(addr)
    for i in range(3):
        answer = connection.invoke(RemotingCommand.request(1, {"k": f"v{i}"}, b"body" * i), 5)
        assert answer.ext_fields == {"echo": f"v{i}"} and answer.body == b"body" * i
    with pytest.raises(RemotingTimeoutError):
        connection.invoke(RemotingCommand.request(2, {"k": "slow"}), 0.05)
    # The slow answer comes in before the next request is written: it is not taken for that one's.
    readable, _, _ = select.select([connection._sock], [], [], 5)
    assert readable
    answer = connection.invoke(RemotingCommand.request(1, {"k": "after"}), 5)
    assert answer.ext_fields == {"echo": "after"}
    asyncio.run_coroutine_threadsafe(remoting.shutdown(), loop).result(10)
    with pytest.raises(RemotingConnectError):
        connection.invoke(RemotingCommand.request(1, {"k": "gone"}), 5)
    assert not connection.is_open
    with pytest.raises(RemotingConnectError):
        BlockingConnection(addr)
