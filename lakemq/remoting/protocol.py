"""One connection, either side: frames in and out, responses matched to requests by opaque.

Requests that arrive (a client's request on the server, or a server's CHECK_TRANSACTION_STATE
on a client) go to the ``on_request`` callback; what answers them is the dispatcher's job.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from lakemq.common.codes import ResponseCode
from lakemq.common.logs import LogLimiter
from lakemq.errors import FrameError, RemotingConnectError, RemotingTimeoutError
from lakemq.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    RemotingCommand,
    encode,
    encode_frame,
    encode_parts,
)

__all__ = ["RemotingConnection", "RequestCallback"]

log = logging.getLogger(__name__)

RequestCallback = Callable[["RemotingConnection", RemotingCommand], None]

# What peers send wrong is logged rate limited: a flood of bad frames must not fill the disk.
_BAD_FRAME_LOG = LogLimiter()
_STRAY_RESPONSE_LOG = LogLimiter()

# A body at least this large is handed to the transport after its header as it is
# (writelines), not copied into one buffer with it first.
_SEPARATE_BODY = 16 * 1024


def _frames(command: RemotingCommand) -> list[bytes]:
    """A command's bytes to write: one frame, or its header then a large body as it is."""
    if len(command.body) >= _SEPARATE_BODY:
        return list(encode_parts(command))
    return [encode_frame(command)]


def _write(transport: asyncio.Transport, frames: list[bytes]) -> None:
    if len(frames) == 1:
        transport.write(frames[0])
    else:
        transport.writelines(frames)


def _expire(future: asyncio.Future[RemotingCommand], addr: str, code: int, timeout: float) -> None:
    if not future.done():
        future.set_exception(RemotingTimeoutError(f"no response from {addr} to code {code} in {timeout:.3f}s"))


class RemotingConnection(asyncio.Protocol):
    """An asyncio protocol per socket. ``reply_on_frame_error`` (servers) answers a bad frame
    with a SYSTEM_ERROR response naming the problem before closing, since the peer cannot be
    told otherwise why its connection went away."""

    def __init__(self, on_request: RequestCallback, *,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 reply_on_frame_error: bool = False,
                 on_close: Callable[[RemotingConnection], None] | None = None) -> None:
        self._on_request = on_request
        self._on_close = on_close
        self._decoder = FrameDecoder(max_frame_length)
        self._reply_on_frame_error = reply_on_frame_error
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._closed = asyncio.get_running_loop().create_future()
        self._writable = asyncio.Event()
        self._writable.set()
        self.remote_addr = ""
        self.loop = asyncio.get_running_loop()
        # The dispatcher's per-connection RequestContext, made once instead of per request.
        self.context: Any = None
        # Responses held while one read's several requests are handled (see data_received).
        self._held: list[bytes] | None = None

    # asyncio.Protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have write/writelines.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_addr = f"{peer[0]}:{peer[1]}"

    def data_received(self, data: bytes) -> None:
        if not self.is_open:
            return
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            _BAD_FRAME_LOG.log(log, logging.WARNING, "closing %s: %s", self.remote_addr, exc)
            if self._reply_on_frame_error and self._transport is not None:
                error = RemotingCommand(code=ResponseCode.SYSTEM_ERROR, flag=FLAG_RESPONSE,
                                        remark=f"bad frame: {exc}")
                self._transport.write(encode(error))
            self.close()
            return
        if len(commands) > 1:
            # Pipelined requests (async producers, many pulls on one connection): the answers
            # made while handling them are written together at the end, one syscall, not one each.
            self._held = []
            try:
                self._handle(commands)
            finally:
                held, self._held = self._held, None
                if held and self._transport is not None and not self._transport.is_closing():
                    self._transport.writelines(held)
        else:
            self._handle(commands)

    def _handle(self, commands: list[RemotingCommand]) -> None:
        for command in commands:
            if command.flag & FLAG_RESPONSE:
                future = self._pending.pop(command.opaque, None)
                if future is None:
                    _STRAY_RESPONSE_LOG.log(log, logging.WARNING,
                                            "response from %s for unknown opaque %d (code %d): %s",
                                            self.remote_addr, command.opaque, command.code, command.remark)
                elif not future.done():
                    future.set_result(command)
            else:
                self._on_request(self, command)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._writable.set()
        error = RemotingConnectError(f"connection to {self.remote_addr} closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # API

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` (its opaque is assigned here) and wait for the response."""
        request.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        request.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        loop = self.loop
        future: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = future
        # A timer that fails the future, not asyncio.timeout: no Timeout object, no task
        # cancellation and uncancel per request (a sync send's client path runs this each time).
        timer = loop.call_later(timeout, _expire, future, self.remote_addr, request.code, timeout)
        try:
            if not self._writable.is_set():
                await self._wait_writable(future)
            if not self.is_open:
                raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
            self._send_frame(request)
            return await future
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    async def _wait_writable(self, future: asyncio.Future[RemotingCommand]) -> None:
        """Until the transport takes writes again, or the request's future fails first (its
        timeout, the connection lost), whose error is raised then."""
        writable = self.loop.create_task(self._writable.wait())
        try:
            await asyncio.wait((writable, future), return_when=asyncio.FIRST_COMPLETED)
        finally:
            writable.cancel()
        if future.done():
            future.result()

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        request.opaque = next(self._opaques) & 0x7FFFFFFF
        request.flag = (request.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        await self._write(request)

    def send_response(self, response: RemotingCommand) -> None:
        """Write a response from the loop thread; dropped (and logged) if the peer is gone."""
        transport = self._transport
        if transport is None or transport.is_closing():
            log.info("dropping response %d to closed %s", response.opaque, self.remote_addr)
            return
        self._emit(transport, _frames(response))

    def send_responses(self, responses: list[RemotingCommand]) -> None:
        """Several responses from the loop thread in one write (send_response's rules)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            log.info("dropping responses %s to closed %s", [r.opaque for r in responses], self.remote_addr)
            return
        frames: list[bytes] = []
        for response in responses:
            frames += _frames(response)
        self._emit(transport, frames)

    def _emit(self, transport: asyncio.Transport, frames: list[bytes]) -> None:
        """Held for the end of the current read (pipelined requests), else written now."""
        if self._held is not None:
            self._held += frames
        else:
            _write(transport, frames)

    def send_response_threadsafe(self, response: RemotingCommand) -> None:
        self.loop.call_soon_threadsafe(self.send_response, response)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def _write(self, command: RemotingCommand) -> None:
        if not self._writable.is_set():
            await self._writable.wait()
        if not self.is_open:
            raise RemotingConnectError(f"connection to {self.remote_addr} is closed")
        self._send_frame(command)

    def _send_frame(self, command: RemotingCommand) -> None:
        assert self._transport is not None
        _write(self._transport, _frames(command))
