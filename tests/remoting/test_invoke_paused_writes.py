"""The client side of a request: one waiting for a paused transport (back-pressure) over real
loopback sockets is written once writes resume, and times out - with the pending slot
released - when they do not resume in time (the invoke's timer covers that wait too); and the
send header's extFields written from values match the header encoder's."""

from __future__ import annotations

import asyncio
import time

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import RemotingConnectError, RemotingTimeoutError
from lakemq.remoting import (
    RemotingClient,
    RemotingClientConfig,
    RemotingCommand,
    RemotingServer,
    RequestContext,
    ServerConfig,
)

pytestmark = pytest.mark.timeout(30)


class Echo:
    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, ext_fields=request.ext_fields)

    def reject_request(self) -> bool:
        return False


async def test_paused_then_resumed_and_paused_until_timeout() -> None:
    server = RemotingServer(ServerConfig(listen_port=0))
    server.register_processor(RequestCode.HEART_BEAT, Echo())
    await server.start()
    client = RemotingClient(RemotingClientConfig(connect_timeout=1.0))
    try:
        first = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        assert first.code == ResponseCode.SUCCESS
        [connection] = client._connections.values()

        connection.pause_writing()
        waiting = asyncio.create_task(connection.invoke(
            RemotingCommand.request(RequestCode.HEART_BEAT, {"n": "2"}), 2.0))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # held back while the transport is paused
        connection.resume_writing()
        assert (await waiting).ext_fields == {"n": "2"}

        connection.pause_writing()
        started = time.monotonic()
        with pytest.raises(RemotingTimeoutError, match="in 0.200s"):
            await connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), 0.2)
        assert 0.15 < time.monotonic() - started < 1.0
        assert connection._pending == {}

        # A connection lost while a request waits for writes fails that request at once.
        waiting = asyncio.create_task(connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), 5.0))
        await asyncio.sleep(0.1)
        connection.close()
        with pytest.raises(RemotingConnectError):
            await waiting
    finally:
        await client.shutdown()
        await server.shutdown()


def test_send_header_fields_match_the_header_encoder() -> None:
    """The producer's send path writes V2 extFields from values; they must be exactly what
    the header encoder writes for the same header (defaults, bools, None left out)."""
    from lakemq.remoting.headers import SendMessageRequestHeader, encode_send_header_v2, send_header_v2_fields

    values = ("pg", "T", "TBW102", 4, 3, 0, 1795489742668, 0, "UNIQ_KEY\x01A\x02", 2, False, None, True)
    assert send_header_v2_fields(*values) == encode_send_header_v2(SendMessageRequestHeader(*values))
    assert send_header_v2_fields(*values[:8]) == encode_send_header_v2(SendMessageRequestHeader(*values[:8]))
    assert send_header_v2_fields(*values)["m"] == "true" and "l" not in send_header_v2_fields(*values)
