"""``apache.rocketmq.v2.MessagingService`` over the broker core: each RPC is a thin face over the
same code the remoting processors run (docs/ARCHITECTURE.md, "Two protocol faces").

- QueryRoute: the topic's queues on this broker (TopicConfigManager), each with this broker's
  gRPC endpoint, its permission and the message types it takes.
- Heartbeat: a producer's Telemetry registrations are kept alive; a consumer group is found
  or auto-created as a remoting heartbeat does (SubscriptionGroupManager).
- SendMessage: each v2 message becomes a 4.x send (lakemq.broker.grpc.convert) and goes through
  SendMessageProcessor.send_message: the same checks, half messages, put and acknowledgement.
- QueryAssignment: one assignment per broker (queue id -1), as RocketMQ's proxy answers 5.x
  push consumers, who then receive from all of the broker's readable queues.
- EndTransaction: EndTransactionProcessor.end_transaction, in its pool.
- NotifyClientTermination: the client's registrations are dropped.
- Telemetry: lakemq.broker.grpc.telemetry.
- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue:
  lakemq.broker.grpc.consume, over the POP core the remoting POP codes use.
- RecallMessage: the timer's recall (lakemq.broker.processor.recall_processor.recall_message,
  RECALL_MESSAGE's core), in a worker thread (a recall stores a marker); a timed send's
  result carries its recall handle.
- The pull-style RPCs answer NOT_IMPLEMENTED in their v2 status, with a message naming the
  RPC.

With ``aclEnable`` every call is checked by the remoting ACL's validator (auth.py) with the
permissions the matching remoting request needs.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

from lakemq.broker.acl.permission import ANY, PUB, SUB
from lakemq.broker.config import BrokerConfig
from lakemq.broker.grpc.auth import GrpcAcl
from lakemq.broker.grpc.consume import Consumption
from lakemq.broker.grpc.convert import (
    SendRefused,
    decode_transaction_id,
    encode_transaction_id,
    enum_name,
    send_header,
)
from lakemq.broker.grpc.status import NOT_IMPLEMENTED_YET, OK, status, status_of_response
from lakemq.broker.grpc.telemetry import SettingsPolicy, TelemetrySession
from lakemq.broker.pop.service import PopService
from lakemq.broker.processor.recall_processor import RecallResult
from lakemq.broker.processor.send_processor import SendMessageProcessor
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.broker.transaction.end_transaction_processor import EndTransactionProcessor
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageSysFlag
from lakemq.errors import BrokerError
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.remoting.headers import EndTransactionRequestHeader
from lakemq.store.results import PutMessageStatus

__all__ = ["Call", "MessagingService"]

log = logging.getLogger(__name__)

_ACCEPTED_TYPES = (v2.MessageType.NORMAL, v2.MessageType.FIFO, v2.MessageType.DELAY, v2.MessageType.TRANSACTION)
_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})
# The validator's refusals of who the caller is (else: of what it may do).
_IDENTITY_REFUSALS = ("No accessKey is configured", "No acl config for", "Check signature failed")
_RESOLUTION = {v2.TransactionResolution.COMMIT: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
               v2.TransactionResolution.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE}


@dataclass(frozen=True, slots=True)
class Call:
    """Who called: the peer's host:port, the call's metadata, the client's id; the seconds
    left before the call's deadline (None: it has none)."""

    remote_addr: str
    metadata: Mapping[str, str]
    time_remaining: float | None = None

    @property
    def client_id(self) -> str:
        return self.metadata.get("x-mq-client-id", "")


def _permission(perm: int) -> v2.Permission:
    readable, writeable = PermName.is_readable(perm), PermName.is_writeable(perm)
    if readable and writeable:
        return v2.Permission.READ_WRITE
    return v2.Permission.READ if readable else v2.Permission.WRITE if writeable else v2.Permission.NONE


class MessagingService:
    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 producers: ProducerManager, send: SendMessageProcessor, end_transaction: EndTransactionProcessor,
                 end_transaction_pool: Executor, settings: SettingsPolicy, acl: GrpcAcl | None,
                 pop: PopService | None, recall: Callable[[str, str], RecallResult]) -> None:
        self._config = config
        self._topics = topics
        self._groups = groups
        self._producers = producers
        self._send = send
        self._end_transaction = end_transaction
        self._end_pool = end_transaction_pool
        self._settings = settings
        self._acl = acl
        self._sessions: dict[str, TelemetrySession] = {}
        self._recall = recall
        self.consumption = Consumption(config, groups, pop, settings.long_polling_ms)
        self.endpoint = v2.Endpoints()

    def serve_at(self, host: str, port: int) -> None:
        """The endpoint routes name (the gRPC listener's, once bound)."""
        version = 0
        try:
            version = ipaddress.ip_address(host).version
        except ValueError:
            pass  # a host name
        scheme = {4: v2.AddressScheme.IPv4, 6: v2.AddressScheme.IPv6}.get(version, v2.AddressScheme.DOMAIN_NAME)
        self.endpoint = v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=host, port=port)])

    def _check(self, call: Call, code: int, topics: tuple[tuple[str, int], ...] = (),
               groups: tuple[tuple[str, int], ...] = ()) -> v2.Status | None:
        """None when the ACL lets the call through, else the FORBIDDEN/UNAUTHORIZED status."""
        if self._acl is None:
            return None
        try:
            self._acl.check(call.metadata, call.remote_addr, code, topics, groups)
        except BrokerError as exc:
            log.warning("gRPC call from %s refused by the ACL: %s", call.remote_addr, exc.remark)
            who = exc.remark.startswith(_IDENTITY_REFUSALS)
            return status(v2.Code.UNAUTHORIZED if who else v2.Code.FORBIDDEN, exc.remark)
        return None

    # -- routes and clients ---------------------------------------------------------------

    def _broker(self) -> v2.Broker:
        return v2.Broker(name=self._config.broker_name, id=self._config.broker_id, endpoints=self.endpoint)

    async def query_route(self, req: rpc.QueryRouteRequest, call: Call) -> rpc.QueryRouteResponse:
        topic = req.topic.name
        refused = self._check(call, RequestCode.GET_ROUTEINFO_BY_TOPIC, ((topic, ANY),))
        if refused is not None:
            return rpc.QueryRouteResponse(status=refused)
        tc = self._topics.select_topic_config(topic)
        if tc is None:
            return rpc.QueryRouteResponse(status=status(v2.Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        broker = self._broker()
        queues = []
        for queue_id in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            perm = tc.perm & self._config.broker_permission
            if queue_id >= tc.read_queue_nums:
                perm &= ~PermName.PERM_READ
            if queue_id >= tc.write_queue_nums:
                perm &= ~PermName.PERM_WRITE
            queues.append(v2.MessageQueue(topic=req.topic, id=queue_id, permission=_permission(perm), broker=broker,
                                          accept_message_types=_ACCEPTED_TYPES))
        return rpc.QueryRouteResponse(status=OK, message_queues=queues)

    async def heartbeat(self, req: rpc.HeartbeatRequest, call: Call) -> rpc.HeartbeatResponse:
        group = req.group.name
        refused = self._check(call, RequestCode.HEART_BEAT, groups=((group, SUB),))
        if refused is not None:
            return rpc.HeartbeatResponse(status=refused)
        session = self._sessions.get(call.client_id)
        if session is not None:
            session.refresh()
        if group and await asyncio.to_thread(self._groups.find_subscription_group_config, group) is None:
            return rpc.HeartbeatResponse(status=status(v2.Code.CONSUMER_GROUP_NOT_FOUND,
                                                       f"consumer group {group} does not exist"))
        return rpc.HeartbeatResponse(status=OK)

    async def query_assignment(self, req: rpc.QueryAssignmentRequest, call: Call) -> rpc.QueryAssignmentResponse:
        topic, group = req.topic.name, req.group.name
        refused = self._check(call, RequestCode.QUERY_ASSIGNMENT, ((topic, SUB),), ((group, SUB),))
        if refused is not None:
            return rpc.QueryAssignmentResponse(status=refused)
        tc = self._topics.select_topic_config(topic)
        if tc is None:
            return rpc.QueryAssignmentResponse(status=status(v2.Code.TOPIC_NOT_FOUND,
                                                             f"topic {topic} does not exist"))
        if not (PermName.is_readable(tc.perm) and PermName.is_readable(self._config.broker_permission)
                and tc.read_queue_nums > 0):
            return rpc.QueryAssignmentResponse(status=status(v2.Code.FORBIDDEN, f"topic {topic} is not readable"))
        queue = v2.MessageQueue(topic=req.topic, id=-1, permission=_permission(tc.perm), broker=self._broker(),
                                accept_message_types=_ACCEPTED_TYPES)
        return rpc.QueryAssignmentResponse(status=OK, assignments=[v2.Assignment(message_queue=queue)])

    async def notify_client_termination(self, req: rpc.NotifyClientTerminationRequest,
                                        call: Call) -> rpc.NotifyClientTerminationResponse:
        session = self._sessions.pop(call.client_id, None)
        if session is not None:
            session.close()
        self.consumption.drop_client(call.client_id)
        log.info("5.x client %s (%s) terminated", call.client_id, call.remote_addr)
        return rpc.NotifyClientTerminationResponse(status=OK)

    # -- sending ------------------------------------------------------------------------

    async def send_message(self, req: rpc.SendMessageRequest, call: Call) -> rpc.SendMessageResponse:
        if not req.messages:
            return rpc.SendMessageResponse(status=status(v2.Code.BAD_REQUEST, "no message to send"))
        topics = {m.topic.name for m in req.messages}
        if len(topics) > 1:
            return rpc.SendMessageResponse(status=status(v2.Code.BAD_REQUEST,
                                                         "the messages of one send must share a topic"))
        refused = self._check(call, RequestCode.SEND_MESSAGE_V2, ((next(iter(topics)), PUB),))
        if refused is not None:
            return rpc.SendMessageResponse(status=refused)
        entries = [await self._send_one(m, call) for m in req.messages]
        # The response's status is the first failure's, as the proxy answers.
        first_bad = next((e.status for e in entries if e.status.code != v2.Code.OK), OK)
        return rpc.SendMessageResponse(status=first_bad, entries=entries)

    async def _send_one(self, msg: v2.Message, call: Call) -> rpc.SendResultEntry:
        tc = self._topics.select_topic_config(msg.topic.name)
        try:
            spec = send_header(msg, max_body=self._settings.max_body_size,
                               write_queues=tc.write_queue_nums if tc is not None else 0)
            _queue_id, result, recall_handle = await self._send.send_message(call.remote_addr, spec.header,
                                                                             spec.body)
        except SendRefused as exc:
            return rpc.SendResultEntry(status=status(exc.code, exc.message),
                                       message_id=msg.system_properties.message_id)
        except BrokerError as exc:
            return rpc.SendResultEntry(status=status_of_response(exc.code, exc.remark),
                                       message_id=msg.system_properties.message_id)
        append = result.append_result
        if append is None or result.status not in _STORED:
            log.warning("5.x send to %s from %s refused: %s %s", msg.topic.name, call.remote_addr,
                        result.status.name, result.remark)
            return rpc.SendResultEntry(status=status(v2.Code.INTERNAL_SERVER_ERROR,
                                                     f"{result.status.name} {result.remark}".strip()),
                                       message_id=spec.message_id)
        code = {PutMessageStatus.PUT_OK: v2.Code.OK,
                PutMessageStatus.FLUSH_DISK_TIMEOUT: v2.Code.MASTER_PERSISTENCE_TIMEOUT,
                PutMessageStatus.FLUSH_SLAVE_TIMEOUT: v2.Code.SLAVE_PERSISTENCE_TIMEOUT,
                PutMessageStatus.SLAVE_NOT_AVAILABLE: v2.Code.HA_NOT_AVAILABLE}[result.status]
        entry = rpc.SendResultEntry(status=status(code, result.status.name), message_id=spec.message_id,
                                    offset=append.logics_offset)
        if recall_handle:
            entry.recall_handle = recall_handle
        if spec.transactional:
            entry.transaction_id = encode_transaction_id(append.wrote_offset, append.logics_offset)
        return entry

    async def end_transaction(self, req: rpc.EndTransactionRequest, call: Call) -> rpc.EndTransactionResponse:
        topic = req.topic.name
        refused = self._check(call, RequestCode.END_TRANSACTION, ((topic, PUB),))
        if refused is not None:
            return rpc.EndTransactionResponse(status=refused)
        offsets = decode_transaction_id(req.transaction_id)
        if offsets is None:
            return rpc.EndTransactionResponse(status=status(
                v2.Code.INVALID_TRANSACTION_ID, f"transaction id {req.transaction_id!r} is not one lakemq gave"))
        header = EndTransactionRequestHeader(
            producer_group=topic, tran_state_table_offset=offsets[1], commit_log_offset=offsets[0],
            commit_or_rollback=_RESOLUTION.get(req.resolution, MessageSysFlag.TRANSACTION_NOT_TYPE),
            msg_id=req.message_id, topic=topic,
            from_transaction_check=req.source == v2.TransactionSource.SOURCE_SERVER_CHECK,
            transaction_id=req.message_id)
        loop = asyncio.get_running_loop()
        try:
            remark = await loop.run_in_executor(self._end_pool, self._end_transaction.end_transaction, header,
                                                call.remote_addr)
        except BrokerError as exc:
            return rpc.EndTransactionResponse(status=status_of_response(exc.code, exc.remark))
        return rpc.EndTransactionResponse(status=status(v2.Code.OK, remark or "OK"))

    # -- telemetry ----------------------------------------------------------------------

    def open_session(self, call: Call) -> TelemetrySession:
        session = TelemetrySession(call.client_id, call.remote_addr, self._producers)
        old = self._sessions.get(call.client_id)
        if old is not None:
            old.close()
        self._sessions[call.client_id] = session
        return session

    def close_session(self, session: TelemetrySession) -> None:
        if self._sessions.get(session.client_id) is session:
            del self._sessions[session.client_id]
            self.consumption.drop_client(session.client_id)  # a client gone: its renewals stop
        session.close()

    async def close(self) -> None:
        await self.consumption.close()

    async def on_telemetry(self, command: rpc.TelemetryCommand, session: TelemetrySession, call: Call) -> None:
        kind = command.WhichOneof("command")
        if kind != "settings":
            session.unexpected(kind or "a command without content")
            return
        asked = command.settings
        if not call.client_id:  # the stream is the client's channel: it must say whose
            session.send(rpc.TelemetryCommand(status=status(v2.Code.CLIENT_ID_REQUIRED,
                                                            "Telemetry needs the x-mq-client-id header")))
            return
        if asked.client_type == v2.ClientType.PRODUCER:
            topics = tuple(t.name for t in asked.publishing.topics)
            refused = self._check(call, RequestCode.HEART_BEAT, tuple((t, PUB) for t in topics))
            if refused is not None:
                session.send(rpc.TelemetryCommand(status=refused))
                return
            session.register_producer(topics, enum_name(v2.Language, asked.user_agent.language))
            session.send(rpc.TelemetryCommand(status=OK, settings=self._settings.producer(asked)))
            return
        if asked.client_type in (v2.ClientType.PUSH_CONSUMER, v2.ClientType.SIMPLE_CONSUMER):
            group = asked.subscription.group.name
            refused = self._check(call, RequestCode.HEART_BEAT, groups=((group, SUB),))
            if refused is not None:
                session.send(rpc.TelemetryCommand(status=refused))
                return
            config = await asyncio.to_thread(self._groups.find_subscription_group_config, group)
            if config is None:
                session.send(rpc.TelemetryCommand(status=status(v2.Code.CONSUMER_GROUP_NOT_FOUND,
                                                                f"consumer group {group} does not exist")))
                return
            session.send(rpc.TelemetryCommand(status=OK, settings=self._settings.consumer(asked, config)))
            return
        session.send(rpc.TelemetryCommand(status=status(
            v2.Code.UNRECOGNIZED_CLIENT_TYPE,
            f"client type {enum_name(v2.ClientType, asked.client_type)} is not served by lakemq")))

    async def recall_message(self, req: rpc.RecallMessageRequest, call: Call) -> rpc.RecallMessageResponse:
        topic = req.topic.name
        refused = self._check(call, RequestCode.RECALL_MESSAGE, ((topic, PUB),))
        if refused is not None:
            return rpc.RecallMessageResponse(status=refused)
        result = await asyncio.to_thread(self._recall, topic, req.recall_handle)
        if result.code == ResponseCode.SUCCESS:
            return rpc.RecallMessageResponse(status=status(v2.Code.OK, result.remark), message_id=result.message_id)
        log.info("RecallMessage of %s from %s: %s", topic, call.remote_addr, result.remark)
        if result.code == ResponseCode.ILLEGAL_OPERATION:  # a handle that recalls nothing: the caller's error
            return rpc.RecallMessageResponse(status=status(v2.Code.BAD_REQUEST, result.remark),
                                             message_id=result.message_id)
        return rpc.RecallMessageResponse(status=status_of_response(result.code, result.remark),
                                         message_id=result.message_id)

    # -- consuming (lakemq.broker.grpc.consume) ------------------------------------------

    async def receive_message(self, req: rpc.ReceiveMessageRequest,
                              call: Call) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        refused = self._check(call, RequestCode.POP_MESSAGE, ((req.message_queue.topic.name, SUB),),
                              ((req.group.name, SUB),))
        if refused is not None:
            yield rpc.ReceiveMessageResponse(status=refused)
            return
        async for response in self.consumption.receive(req, call.client_id, call.time_remaining):
            yield response

    async def ack_message(self, req: rpc.AckMessageRequest, call: Call) -> rpc.AckMessageResponse:
        refused = self._check(call, RequestCode.ACK_MESSAGE, ((req.topic.name, SUB),), ((req.group.name, SUB),))
        if refused is not None:
            return rpc.AckMessageResponse(status=refused)
        return await self.consumption.ack(req)

    async def change_invisible_duration(self, req: rpc.ChangeInvisibleDurationRequest,
                                        call: Call) -> rpc.ChangeInvisibleDurationResponse:
        refused = self._check(call, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ((req.topic.name, SUB),),
                              ((req.group.name, SUB),))
        if refused is not None:
            return rpc.ChangeInvisibleDurationResponse(status=refused)
        return await self.consumption.change_invisible(req)

    async def forward_to_dead_letter_queue(self, req: rpc.ForwardMessageToDeadLetterQueueRequest,
                                           call: Call) -> rpc.ForwardMessageToDeadLetterQueueResponse:
        refused = self._check(call, RequestCode.CONSUMER_SEND_MSG_BACK, ((req.topic.name, SUB),),
                              ((req.group.name, SUB),))
        if refused is not None:
            return rpc.ForwardMessageToDeadLetterQueueResponse(status=refused)
        return await self.consumption.forward_to_dlq(req)

    # -- not served yet -----------------------------------------------------------------

    @staticmethod
    def not_implemented(rpc_name: str) -> v2.Status:
        return status(v2.Code.NOT_IMPLEMENTED, NOT_IMPLEMENTED_YET.format(rpc=rpc_name))
