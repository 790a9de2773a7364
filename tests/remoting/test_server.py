"""RemotingServer and RemotingClient over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import RemotingConnectError, RemotingTimeoutError, TopicNotExistError
from lakemq.remoting import (
    RemotingClient,
    RemotingClientConfig,
    RemotingCommand,
    RemotingServer,
    RequestContext,
    SerializeType,
    ServerConfig,
    SyncRemotingClient,
    decode_frame,
    encode,
)
from lakemq.remoting.headers import GetRouteInfoRequestHeader, decode_header

pytestmark = pytest.mark.timeout(30)


class Echo:
    """Answers with the request's ext fields and body; ``delay`` simulates slow work."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.seen: list[RemotingCommand] = []

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        self.seen.append(request)
        await asyncio.sleep(self.delay)
        return request.reply(ResponseCode.SUCCESS, ext_fields=request.ext_fields, body=request.body)

    def reject_request(self) -> bool:
        return False


class Blocking:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        self.threads.append(threading.current_thread().name)
        time.sleep(0.01)
        return request.reply(ResponseCode.SUCCESS, remark="done in pool")

    def reject_request(self) -> bool:
        return False


class Raising:
    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if request.ext_fields.get("kind") == "topic":
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no such topic")
        if request.ext_fields.get("kind") == "header":
            decode_header(GetRouteInfoRequestHeader, request.ext_fields)  # no topic: a malformed request
        raise ValueError("boom")

    def reject_request(self) -> bool:
        return False


class Busy(Echo):
    def reject_request(self) -> bool:
        return True


@asynccontextmanager
async def running() -> AsyncIterator[tuple[RemotingServer, RemotingClient]]:
    srv = RemotingServer(ServerConfig(listen_port=0, max_frame_length=64 * 1024))
    srv.register_processor(RequestCode.HEART_BEAT, Echo())
    srv.register_processor(RequestCode.SEND_MESSAGE, Echo(delay=0.5))
    srv.register_processor(RequestCode.PULL_MESSAGE, Raising())
    srv.register_processor(RequestCode.QUERY_MESSAGE, Busy())
    await srv.start()
    cli = RemotingClient(RemotingClientConfig(connect_timeout=1.0))
    try:
        yield srv, cli
    finally:
        await cli.shutdown()
        await srv.shutdown()


async def test_sync_invoke_roundtrip() -> None:
    async with running() as (server, client):
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {"k": "v"}, b"payload")
        response = await client.invoke(server.address, request, 2.0)
        assert response.code == ResponseCode.SUCCESS
        assert response.opaque == request.opaque and response.is_response
        assert response.ext_fields == {"k": "v"} and response.body == b"payload"


async def test_many_concurrent_invokes_match_by_opaque() -> None:
    async with running() as (server, client):
        requests = [RemotingCommand.request(RequestCode.HEART_BEAT, {"i": str(i)}) for i in range(200)]
        responses = await asyncio.gather(*(client.invoke(server.address, r, 5.0) for r in requests))
        assert [r.ext_fields["i"] for r in responses] == [str(i) for i in range(200)]


async def test_rocketmq_serialization_answered_in_kind() -> None:
    async with running() as (server, client):
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {"x": "1"})
        request.serialize_type = SerializeType.ROCKETMQ
        response = await client.invoke(server.address, request, 2.0)
        assert response.serialize_type == SerializeType.ROCKETMQ
        assert response.ext_fields == {"x": "1"}


async def test_timeout() -> None:
    async with running() as (server, client):
        started = time.monotonic()
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(server.address, RemotingCommand.request(RequestCode.SEND_MESSAGE), 0.1)
        assert time.monotonic() - started < 0.4
        # The late response is dropped and the connection keeps working.
        ok = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        assert ok.code == ResponseCode.SUCCESS


async def test_oneway_gets_no_response() -> None:
    async with running() as (server, client):
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {"one": "way"})
        await client.invoke_oneway(server.address, request)
        echo = await _processor_seen(server, RequestCode.HEART_BEAT, lambda r: r.is_oneway)
        assert echo.ext_fields == {"one": "way"}


async def _processor_seen(server: RemotingServer, code: int, pred) -> RemotingCommand:  # type: ignore[no-untyped-def]
    processor = server._dispatcher._table[code][0]
    for _ in range(100):
        hits = [r for r in processor.seen if pred(r)]  # type: ignore[attr-defined]
        if hits:
            return hits[0]
        await asyncio.sleep(0.01)
    raise AssertionError("request never reached the processor")


async def test_unknown_code_not_supported() -> None:
    async with running() as (server, client):
        response = await client.invoke(server.address, RemotingCommand.request(9999), 2.0)
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "9999" in (response.remark or "")


async def test_processor_errors_become_responses() -> None:
    async with running() as (server, client):
        coded = await client.invoke(server.address,
                                    RemotingCommand.request(RequestCode.PULL_MESSAGE, {"kind": "topic"}), 2.0)
        assert (coded.code, coded.remark) == (ResponseCode.TOPIC_NOT_EXIST, "no such topic")
        other = await client.invoke(server.address, RemotingCommand.request(RequestCode.PULL_MESSAGE), 2.0)
        assert other.code == ResponseCode.SYSTEM_ERROR and "boom" in (other.remark or "")


async def test_failed_requests_are_logged_one_line_each_by_kind(caplog) -> None:  # type: ignore[no-untyped-def]
    """A malformed request is the client's fault: one WARNING naming the peer, no traceback; a
    refusal with a code is INFO; only an unexpected failure (ours) carries a traceback."""
    async with running() as (server, client):
        with caplog.at_level(logging.INFO, logger="lakemq.remoting.dispatch"):
            bad = await client.invoke(server.address,
                                      RemotingCommand.request(RequestCode.PULL_MESSAGE, {"kind": "header"}), 2.0)
            await client.invoke(server.address, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"kind": "topic"}),
                                2.0)
            await client.invoke(server.address, RemotingCommand.request(RequestCode.PULL_MESSAGE), 2.0)
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark == "the custom field <topic> is null"
    by_level = {r.levelno: r for r in caplog.records if r.name == "lakemq.remoting.dispatch"}
    warning, info, error = by_level[logging.WARNING], by_level[logging.INFO], by_level[logging.ERROR]
    assert not warning.exc_info and "<topic> is null" in warning.getMessage()
    assert "PULL_MESSAGE" in warning.getMessage() and "from 127.0.0.1:" in warning.getMessage()
    assert not info.exc_info and "refused with code 17" in info.getMessage()
    assert error.exc_info and "from 127.0.0.1:" in error.getMessage()


async def test_rejected_request_is_system_busy() -> None:
    async with running() as (server, client):
        response = await client.invoke(server.address, RemotingCommand.request(RequestCode.QUERY_MESSAGE), 2.0)
        assert response.code == ResponseCode.SYSTEM_BUSY


async def test_executor_processor_runs_in_pool() -> None:
    async with running() as (_server, client):
        processor = Blocking()
        with ThreadPoolExecutor(2, thread_name_prefix="SendPool") as pool:
            srv = RemotingServer()
            srv.register_processor(RequestCode.SEND_MESSAGE, processor, pool)
            await srv.start()
            try:
                responses = await asyncio.gather(*(
                    client.invoke(srv.address, RemotingCommand.request(RequestCode.SEND_MESSAGE), 2.0)
                    for _ in range(6)))
            finally:
                await srv.shutdown()
        assert {r.remark for r in responses} == {"done in pool"}
        assert all(name.startswith("SendPool") for name in processor.threads)


def _raw_connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def _read_frame(sock: socket.socket) -> RemotingCommand | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (length,) = struct.unpack(">I", head)
    data = b""
    while len(data) < length:
        chunk = sock.recv(length - len(data))
        assert chunk
        data += chunk
    return decode_frame(data)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


async def test_malformed_frame_closes_only_that_connection() -> None:
    async with running() as (server, client):
        # A healthy connection first, then garbage on another one.
        await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)

        def garbage() -> tuple[RemotingCommand | None, bool]:
            with _raw_connect(server.port) as sock:
                body = b"not json at all"
                sock.sendall(struct.pack(">II", 4 + len(body), len(body)) + body)
                return _read_frame(sock), _closed(sock)

        error, closed = await asyncio.to_thread(garbage)
        assert error is not None and error.code == ResponseCode.SYSTEM_ERROR
        assert "bad frame" in (error.remark or "")
        assert closed
        response = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        assert response.code == ResponseCode.SUCCESS


async def test_oversized_frame_refused() -> None:
    async with running() as (server, client):
        def oversized() -> tuple[RemotingCommand | None, bool]:
            with _raw_connect(server.port) as sock:
                sock.sendall(struct.pack(">I", 64 * 1024))  # limit is 64 KiB including the prefix
                return _read_frame(sock), _closed(sock)

        error, closed = await asyncio.to_thread(oversized)
        assert error is not None and "exceeds the limit" in (error.remark or "")
        assert closed
        big = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"x" * (64 * 1024))
        with pytest.raises(RemotingConnectError):
            await client.invoke(server.address, big, 2.0)
        small = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        assert small.code == ResponseCode.SUCCESS


async def test_server_invokes_client() -> None:
    async with running() as (server, client):
        class CheckState:
            async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
                return request.reply(ResponseCode.SUCCESS, ext_fields={"state": "commit"})

            def reject_request(self) -> bool:
                return False

        client.register_processor(RequestCode.CHECK_TRANSACTION_STATE, CheckState())
        await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        (connection,) = server.connections
        answer = await connection.invoke(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE), 2.0)
        assert answer.ext_fields == {"state": "commit"}


async def test_close_listener_and_reconnect() -> None:
    async with running() as (server, client):
        closed: list[str] = []
        server.add_close_listener(lambda c: closed.append(c.remote_addr))
        await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        (connection,) = server.connections
        connection.close()
        await connection.wait_closed()
        assert closed == [connection.remote_addr]
        response = await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
        assert response.code == ResponseCode.SUCCESS


async def test_connect_refused() -> None:
    async with running() as (_server, client):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with pytest.raises(RemotingConnectError):
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.HEART_BEAT), 1.0)


async def test_namesrv_failover() -> None:
    async with running() as (server, _client):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{probe.getsockname()[1]}"
        cli = RemotingClient(namesrv_addrs=f"{dead};{server.address}")
        try:
            for _ in range(3):
                response = await cli.invoke_namesrv(RemotingCommand.request(RequestCode.HEART_BEAT), 2.0)
                assert response.code == ResponseCode.SUCCESS
        finally:
            await cli.shutdown()


def test_sync_facade(server_thread: str) -> None:
    with SyncRemotingClient(namesrv_addrs=[server_thread]) as cli:
        response = cli.invoke(server_thread, RemotingCommand.request(RequestCode.HEART_BEAT, {"a": "b"}), 2.0)
        assert response.ext_fields == {"a": "b"}
        assert cli.invoke_namesrv(RemotingCommand.request(9999), 2.0).code == \
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        cli.invoke_oneway(server_thread, RemotingCommand.request(RequestCode.HEART_BEAT))


@pytest.fixture
def server_thread() -> Iterator[str]:
    """A server on its own loop thread, for the blocking facade."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = RemotingServer()
    srv.register_processor(RequestCode.HEART_BEAT, Echo())
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result()
    yield srv.address
    asyncio.run_coroutine_threadsafe(srv.shutdown(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_encode_is_what_the_socket_carries() -> None:
    command = RemotingCommand.request(RequestCode.HEART_BEAT)
    assert decode_frame(encode(command)[4:]) == command


async def test_deferred_response_from_another_thread() -> None:
    """Long polling: the processor returns None and answers later from a worker thread."""

    class Held:
        def __init__(self) -> None:
            self.pool = ThreadPoolExecutor(1)

        async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> None:
            def later() -> None:
                time.sleep(0.05)
                ctx.write_response(request.reply(ResponseCode.SUCCESS, remark="woken"))
            self.pool.submit(later)

        def reject_request(self) -> bool:
            return False

    held = Held()
    srv = RemotingServer()
    srv.register_processor(RequestCode.PULL_MESSAGE, held)
    await srv.start()
    cli = RemotingClient()
    try:
        response = await cli.invoke(srv.address, RemotingCommand.request(RequestCode.PULL_MESSAGE), 2.0)
        assert (response.code, response.remark) == (ResponseCode.SUCCESS, "woken")
    finally:
        await cli.shutdown()
        await srv.shutdown()
        held.pool.shutdown()
