"""Loop processors (no executor) may answer at once: a plain result is written straight from
the read callback, an awaitable is awaited, and errors either way become coded responses."""

from __future__ import annotations

import asyncio

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import TopicNotExistError
from lakemq.remoting import RemotingClient, RemotingCommand, RemotingServer, RequestContext, ServerConfig

pytestmark = pytest.mark.timeout(30)


class Immediate:
    """Answers inline, or hands back a future answered later, or raises: as the request says."""

    def __init__(self) -> None:
        self.later: list[asyncio.Future[RemotingCommand]] = []

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> object:
        kind = request.ext_fields.get("kind")
        if kind == "raise":
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no such topic")
        if kind == "later":
            future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
            self.later.append(future)
            return future
        if kind == "oneway":
            return request.reply(ResponseCode.SUCCESS, "must not be written")
        return request.reply(ResponseCode.SUCCESS, "now", body=request.body)

    def reject_request(self) -> bool:
        return False


async def test_immediate_later_raising_and_oneway() -> None:
    processor = Immediate()
    server = RemotingServer(ServerConfig(listen_port=0))
    server.register_processor(RequestCode.SEND_MESSAGE, processor)
    await server.start()
    client = RemotingClient()
    try:
        now = await client.invoke(server.address, RemotingCommand.request(RequestCode.SEND_MESSAGE, body=b"x"), 2.0)
        assert (now.code, now.remark, now.body) == (ResponseCode.SUCCESS, "now", b"x")

        raised = await client.invoke(server.address, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, {"kind": "raise"}), 2.0)
        assert (raised.code, raised.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such topic")

        await client.invoke_oneway(server.address, RemotingCommand.request(RequestCode.SEND_MESSAGE, {"kind": "oneway"}))
        pending = asyncio.create_task(client.invoke(server.address, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, {"kind": "later"}), 2.0))
        while not processor.later:
            await asyncio.sleep(0.01)
        assert not pending.done()
        processor.later[0].set_result(RemotingCommand(code=ResponseCode.SUCCESS, remark="later"))
        later = await pending
        # The oneway request got no answer: the next response on the connection is this one.
        assert (later.code, later.remark) == (ResponseCode.SUCCESS, "later")

        failing = asyncio.create_task(client.invoke(server.address, RemotingCommand.request(
            RequestCode.SEND_MESSAGE, {"kind": "later"}), 2.0))
        while len(processor.later) < 2:
            await asyncio.sleep(0.01)
        processor.later[1].set_exception(ValueError("boom"))
        failed = await failing
        assert failed.code == ResponseCode.SYSTEM_ERROR and "boom" in (failed.remark or "")
    finally:
        await client.shutdown()
        await server.shutdown()
