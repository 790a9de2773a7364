"""Request processors and the code -> processor table both ends use.

A processor is anything with ``process_request(ctx, request)`` and ``reject_request()``:

- registered without an executor, ``process_request`` is ``async def`` and runs on the loop
  (name server lookups, long-polling pulls that await a wake-up);
- registered with an executor (a ThreadPoolExecutor per processor family, as RocketMQ keeps
  one pool per family), it is a plain ``def`` run in that pool (store writes, fsync).

It returns the response, or None for oneway requests and for responses written later with
``ctx.write_response`` (a held pull). Raising a LakeMQError that has a ``code`` answers with
that code and the message as remark; any other exception answers SYSTEM_ERROR.

What the log says of a failed request, one line each and rate limited per kind (a hostile
client must not fill the disk): a refusal with a code at INFO; a malformed request (a header
field missing or not a number, a body that does not decode, a name breaking the rules:
RemotingCommandError, InvalidNameError) at WARNING with the peer's address and no traceback;
anything else is a fault of ours, at ERROR with its traceback.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.logs import LogLimiter
from lakemq.errors import InvalidNameError, RemotingCommandError
from lakemq.remoting.codec import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from lakemq.remoting.protocol import RemotingConnection

__all__ = ["Dispatcher", "RequestContext", "RequestProcessor"]

log = logging.getLogger(__name__)

ProcessResult = RemotingCommand | None | Awaitable[RemotingCommand | None]


@runtime_checkable
class RequestProcessor(Protocol):
    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> ProcessResult: ...

    def reject_request(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a processor knows of the request's connection; it can answer later and can send
    requests back to the peer (broker -> producer CHECK_TRANSACTION_STATE)."""

    connection: RemotingConnection

    @property
    def remote_addr(self) -> str:
        return self.connection.remote_addr

    @property
    def is_open(self) -> bool:
        return self.connection.is_open

    def write_response(self, response: RemotingCommand) -> None:
        """Send a deferred response; safe from any thread."""
        if _in_loop(self.connection.loop):
            self.connection.send_response(response)
        else:
            self.connection.send_response_threadsafe(response)

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        return await self.connection.invoke(request, timeout)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        await self.connection.invoke_oneway(request)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class Dispatcher:
    """Routes each incoming request to its processor and writes the answer."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[RequestProcessor, Executor | None]] = {}
        self._default: tuple[RequestProcessor, Executor | None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._refused_log = LogLimiter()
        self._bad_request_log = LogLimiter()
        self._fault_log = LogLimiter()

    def register(self, code: int, processor: RequestProcessor, executor: Executor | None = None) -> None:
        self._table[int(code)] = (processor, executor)

    def register_default(self, processor: RequestProcessor, executor: Executor | None = None) -> None:
        self._default = (processor, executor)

    def on_request(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        entry = self._table.get(request.code, self._default)
        if entry is not None and entry[1] is None:
            # A loop processor that answers at once (a plain result, not an awaitable) is
            # answered here: no task, no extra turns of the loop on the hot send path.
            ctx = connection.context
            if ctx is None:
                ctx = connection.context = RequestContext(connection)
            result = self._call(entry[0], ctx, request)
            if type(result) is not RemotingCommand and inspect.isawaitable(result):
                self._spawn(self._finish(connection, request, result))
            else:
                self._respond(connection, request, result)
            return
        self._spawn(self._handle(connection, request, entry))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _call(self, processor: RequestProcessor, ctx: RequestContext, request: RemotingCommand) -> ProcessResult:
        try:
            if processor.reject_request():
                return request.reply(ResponseCode.SYSTEM_BUSY,
                                     "[REJECTREQUEST]system busy, start flow control for a while")
            return processor.process_request(ctx, request)
        except Exception as exc:  # noqa: BLE001 - any processor failure becomes the caller's error answer
            return self._error_reply(ctx.remote_addr, request, exc)

    async def _finish(self, connection: RemotingConnection, request: RemotingCommand,
                      pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in _call
            response = self._error_reply(connection.remote_addr, request, exc)
        self._respond(connection, request, response)

    async def _handle(self, connection: RemotingConnection, request: RemotingCommand,
                      entry: tuple[RequestProcessor, Executor | None] | None) -> None:
        if entry is None:
            response: RemotingCommand | None = request.reply(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {request.code} ({_code_name(request.code)}) not supported by lakemq")
        else:
            ctx = connection.context
            if ctx is None:
                ctx = connection.context = RequestContext(connection)
            response = await self._run(entry, ctx, request)
        self._respond(connection, request, response)

    @staticmethod
    def _respond(connection: RemotingConnection, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is not None and not request.flag & FLAG_ONEWAY:
            response.opaque = request.opaque
            response.flag |= FLAG_RESPONSE
            connection.send_response(response)

    async def _run(self, entry: tuple[RequestProcessor, Executor | None], ctx: RequestContext,
                   request: RemotingCommand) -> RemotingCommand | None:
        processor, executor = entry
        try:
            if processor.reject_request():
                return request.reply(ResponseCode.SYSTEM_BUSY,
                                     "[REJECTREQUEST]system busy, start flow control for a while")
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(executor, processor.process_request, ctx, request)
            if inspect.isawaitable(result):
                result = await result
            return result
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in _call
            return self._error_reply(ctx.remote_addr, request, exc)

    def _error_reply(self, peer: str, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        code = getattr(exc, "code", None)
        if isinstance(code, int) and code != ResponseCode.SUCCESS:
            self._refused_log.log(log, logging.INFO, "request %d (%s) from %s refused with code %d: %s",
                                  request.code, _code_name(request.code), peer, code, exc)
            remark = getattr(exc, "remark", None) or str(exc)
            return request.reply(code, remark)
        if isinstance(exc, (RemotingCommandError, InvalidNameError)):
            self._bad_request_log.log(log, logging.WARNING, "bad request %d (%s) from %s: %s",
                                      request.code, _code_name(request.code), peer, exc)
            return request.reply(ResponseCode.SYSTEM_ERROR, str(exc))
        self._fault_log.log(log, logging.ERROR, "processor for request %d (%s) from %s failed",
                            request.code, _code_name(request.code), peer, exc_info=True)
        return request.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return "unknown"
