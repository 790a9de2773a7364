"""The broker's RocketMQ 5 front door: grpcio's asyncio server on ``grpcListenPort`` (0: none),
on the broker's own event loop, serving ``apache.rocketmq.v2.MessagingService``
(lakemq.broker.grpc.service) beside the remoting server.

Every method of the official service definition gets a handler, built from its descriptor:
requests arrive as bytes and are parsed here, so a malformed message is answered
INVALID_ARGUMENT naming the type (grpcio's own deserializer would answer UNKNOWN); a method the
broker does not serve yet answers its response type with a NOT_IMPLEMENTED status; a method
outside the definition is answered UNIMPLEMENTED by grpcio. A call larger than
``maxMessageSize`` plus room for the rest of the request is refused RESOURCE_EXHAUSTED by
grpcio before it is read; a body over ``maxMessageSize`` that fits is answered
MESSAGE_BODY_TOO_LARGE.

TLS (``grpcTlsMode``, RocketMQ proxy's tlsMode): ``disabled`` binds grpcio's plaintext port,
``enforcing`` grpcio's TLS port, ``permissive`` (the default) plaintext and TLS on one port
through the front (lakemq.broker.grpc.front), grpcio listening on loopback behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import Enum
from typing import Any, Final, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass

from lakemq.broker.grpc.convert import host_of_peer
from lakemq.broker.grpc.front import PortFront
from lakemq.broker.grpc.service import Call, MessagingService
from lakemq.broker.grpc.telemetry import TelemetrySession
from lakemq.broker.grpc.tls import TlsMaterial, server_ssl_context
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.grpc._pb.service_pb2 import TelemetryCommand

__all__ = ["GrpcServer", "TlsMode"]

log = logging.getLogger(__name__)

SERVICE: Final = rpc.DESCRIPTOR.services_by_name["MessagingService"]
# Room for a send's other fields beside a body of maxMessageSize (properties, keys, ids).
_REQUEST_HEADROOM: Final = 1 << 20

Req = TypeVar("Req", bound=ProtoMessage)
Resp = TypeVar("Resp", bound=ProtoMessage)


async def _parse(cls: type[Req], data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Req:
    request: Req = cls()
    try:
        request.ParseFromString(data)
        return request
    except DecodeError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"malformed {cls.DESCRIPTOR.full_name}: {exc}")
        raise  # abort raises; this keeps the type checker's flow


class TlsMode(Enum):
    """RocketMQ proxy's tlsMode: plaintext only, both on one port (the default), TLS only."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class GrpcServer:
    def __init__(self, service: MessagingService, host: str, port: int, max_message_size: int,
                 tls_mode: TlsMode, tls: TlsMaterial | None) -> None:
        self._service = service
        self._host = host
        self._port = port
        self._max_request = max_message_size + _REQUEST_HEADROOM
        self._tls_mode = tls_mode
        self._tls = tls
        self._server: grpc.aio.Server | None = None
        self._front: PortFront | None = None
        self.port = 0

    async def start(self) -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", self._max_request),
                                          ("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name,
                                                                              self._handlers()),))
        address = f"{self._host}:{self._port}"
        if self._tls_mode is TlsMode.DISABLED:
            self.port = server.add_insecure_port(address)
        elif self._tls_mode is TlsMode.ENFORCING:
            assert self._tls is not None
            self.port = server.add_secure_port(
                address, grpc.ssl_server_credentials([(self._tls.key_pem, self._tls.cert_pem)]))
        else:
            assert self._tls is not None
            backend = server.add_insecure_port("127.0.0.1:0")
            self._front = PortFront(self._host, self._port, backend, server_ssl_context(self._tls))
        await server.start()
        self._server = server
        if self._front is not None:
            await self._front.start()
            self.port = self._front.port
        self._service.serve_at(self._host, self.port)
        log.info("gRPC (RocketMQ 5) front door on %s:%d, TLS %s%s", self._host, self.port, self._tls_mode.value,
                 " (self-signed certificate)" if self._tls is not None and self._tls.self_signed else "")

    async def shutdown(self, grace: float = 1.0) -> None:
        if self._front is not None:
            await self._front.shutdown()
            self._front = None
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        await self._service.close()

    def _call(self, context: grpc.aio.ServicerContext[Any, Any]) -> Call:
        metadata = {key: value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)}
        peer = host_of_peer(context.peer())
        return Call(self._front.peer(peer) if self._front is not None else peer, metadata, context.time_remaining())

    # -- handlers ---------------------------------------------------------------------

    def _handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        s = self._service
        served: dict[str, Callable[[Any, Call], Awaitable[ProtoMessage]]] = {
            "QueryRoute": s.query_route,
            "Heartbeat": s.heartbeat,
            "SendMessage": s.send_message,
            "QueryAssignment": s.query_assignment,
            "EndTransaction": s.end_transaction,
            "NotifyClientTermination": s.notify_client_termination,
            "AckMessage": s.ack_message,
            "ChangeInvisibleDuration": s.change_invisible_duration,
            "ForwardMessageToDeadLetterQueue": s.forward_to_dead_letter_queue,
            "RecallMessage": s.recall_message,
        }
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in SERVICE.methods:
            request_cls = GetMessageClass(method.input_type)
            response_cls = GetMessageClass(method.output_type)
            serialize = response_cls.SerializeToString
            if method.name == "Telemetry":
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                    self._telemetry, response_serializer=serialize)
            elif method.name == "ReceiveMessage":
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(request_cls, s.receive_message), response_serializer=serialize)
            elif method.client_streaming:
                raise RuntimeError(f"{method.full_name}: a client-streaming RPC lakemq has no handler for")
            elif method.server_streaming:
                handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                    self._not_served_stream(request_cls, response_cls, method.name), response_serializer=serialize)
            elif method.name in served:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(request_cls, served[method.name]), response_serializer=serialize)
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._not_served(request_cls, response_cls, method.name), response_serializer=serialize)
        return handlers

    def _unary(self, request_cls: type[Req], handler: Callable[[Req, Call], Awaitable[Resp]],
               ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
        async def unary(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
            request = await _parse(request_cls, data, context)
            try:
                return await handler(request, self._call(context))
            except Exception as exc:
                log.exception("gRPC %s from %s failed", request_cls.DESCRIPTOR.name, context.peer())
                await context.abort(grpc.StatusCode.INTERNAL, f"lakemq failed the call: {exc!r}")
                raise
        return unary

    def _streaming(self, request_cls: type[Req], handler: Callable[[Req, Call], AsyncIterator[Resp]],
                   ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
        async def streaming(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Resp]:
            request = await _parse(request_cls, data, context)
            async for response in handler(request, self._call(context)):
                yield response
        return streaming

    @staticmethod
    def _not_served(request_cls: type[Req], response_cls: type[Resp], name: str,
                    ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
        async def not_served(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
            await _parse(request_cls, data, context)
            response: Resp = response_cls()
            response.status.CopyFrom(MessagingService.not_implemented(name))
            return response
        return not_served

    @staticmethod
    def _not_served_stream(request_cls: type[Req], response_cls: type[Resp], name: str,
                           ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
        async def not_served(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Resp]:
            await _parse(request_cls, data, context)
            response: Resp = response_cls()
            response.status.CopyFrom(MessagingService.not_implemented(name))
            yield response
        return not_served

    async def _telemetry(self, requests: AsyncIterator[bytes],
                         context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Reads the client's commands in a task while writing the session's out in order."""
        call = self._call(context)
        session = self._service.open_session(call)

        async def read() -> None:
            try:
                async for data in requests:
                    try:
                        command = TelemetryCommand.FromString(data)
                    except DecodeError as exc:
                        session.unexpected(f"malformed apache.rocketmq.v2.TelemetryCommand ({exc})")
                        continue
                    await self._service.on_telemetry(command, session, call)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Telemetry stream of %s (%s) failed", call.client_id, call.remote_addr)
            finally:
                session.close()

        reader = asyncio.create_task(read(), name=f"telemetry-{call.client_id}")
        try:
            await self._write_out(session, context)
        finally:
            reader.cancel()
            self._service.close_session(session)

    @staticmethod
    async def _write_out(session: TelemetrySession, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        while (command := await session.outgoing()) is not None:
            await context.write(command)
