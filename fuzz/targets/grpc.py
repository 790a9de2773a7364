"""The gRPC front door (lakemq.broker.grpc) without a network: the first byte picks a method of
``apache.rocketmq.v2.MessagingService``, the rest is its request as a peer sends it. The
request is parsed as the server parses it (``ParseFromString`` of the method's input type),
then taken where the broker takes it:

- QueryRoute, QueryAssignment, Heartbeat, Telemetry's commands: the real MessagingService
  handlers over real topic and group managers (topic ``TopicA``, group ``GroupA``);
- SendMessage: each message through ``convert.send_header`` into the 4.x send, then into the
  CommitLog's record encoder (PutEncoder: the compiled packer, else the object path), which
  must answer records or a refusal;
- ReceiveMessage: its batch size and durations as the handler checks them, its filter
  expression as Consumption compiles it;
- AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue: the receipt handles'
  parse (a parsed handle encodes back to what parses the same), a change's duration check;
- EndTransaction: the transaction id's decode (what decodes encodes back to the same text);
- RecallMessage: the recall handle's decode, as the recall core does it.

What a handler refuses with a v2 status is a pass; an exception the server would turn into an
UNKNOWN status is a bug."""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final, cast

from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from lakemq.broker.config import BrokerConfig
from lakemq.broker.grpc.consume import Consumption, invisible_duration_ms, requested_times
from lakemq.broker.grpc.convert import SendRefused, decode_transaction_id, encode_transaction_id, send_header
from lakemq.broker.grpc.server import SERVICE
from lakemq.broker.grpc.service import Call, MessagingService
from lakemq.broker.grpc.telemetry import SettingsPolicy
from lakemq.broker.pop.receipt import ReceiptHandle
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfig, TopicConfigManager
from lakemq.common.message import string_to_properties
from lakemq.common.recall_handle import RecallHandle
from lakemq.errors import FilterExpressionError, ReceiptHandleError
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.store.commit_log_encode import PutEncoder
from lakemq.store.config import StoreConfig
from lakemq.store.delay_levels import DelayLevels
from lakemq.store.put_request import PlainPut
from lakemq.store.results import PutMessageResult

__all__ = ["ALLOWED", "METHODS", "one_input"]

ALLOWED: Final = (DecodeError, SendRefused, ReceiptHandleError, FilterExpressionError)
METHODS: Final = tuple(SERVICE.methods)
_MAX_BODY: Final = 1024
_STORE_HOST: Final = "10.0.0.2:10911"
_CLUSTER: Final = b"CLUSTER\x01DefaultCluster\x02"  # what SendMessageProcessor adds to every message
_CALL: Final = Call("127.0.0.1:5000", {"x-mq-client-id": "fuzz-client"})


class _Broker:
    """The parts of a broker the handlers reach, built once (the managers' files in a temp dir)."""

    def __init__(self) -> None:
        self.config = BrokerConfig(auto_create_subscription_group=False)  # no group files per input
        config_dir = Path(tempfile.mkdtemp(prefix="lakemq-fuzz-grpc-"))
        atexit.register(shutil.rmtree, config_dir, True)  # (libFuzzer's own exit skips atexit)
        self.topics = TopicConfigManager(self.config, config_dir)
        self.topics.update_topic_config(TopicConfig("TopicA", 4, 4))
        self.groups = SubscriptionGroupManager(self.config, config_dir)
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("GroupA"))
        store = StoreConfig(store_path_root_dir=str(config_dir / "store"), max_message_size=_MAX_BODY)
        levels = DelayLevels(store.message_delay_level)
        self.settings = SettingsPolicy(_MAX_BODY, levels.delays_ms, 15_000)
        # Only the handlers that need no store are called: send, transactions, POP and recall are
        # driven through their decoders below.
        self.service = MessagingService(self.config, self.topics, self.groups, ProducerManager(), cast(Any, None),
                                        cast(Any, None), cast(Any, None), self.settings, None, None,
                                        cast(Any, None))
        self.consumption = Consumption(self.config, self.groups, None, 15_000)
        self.encoder = PutEncoder(store, 64 * 1024 * 1024, levels)
        self.loop = asyncio.new_event_loop()


_broker: _Broker | None = None


def _parts() -> _Broker:
    global _broker
    if _broker is None:
        _broker = _Broker()
    return _broker


def _send(broker: _Broker, req: rpc.SendMessageRequest) -> None:
    for msg in req.messages:
        tc = broker.topics.select_topic_config(msg.topic.name)
        try:
            spec = send_header(msg, max_body=_MAX_BODY, write_queues=tc.write_queue_nums if tc is not None else 0)
        except SendRefused:
            continue
        header = spec.header
        props = string_to_properties(header.properties or "")
        assert props["UNIQ_KEY"] == msg.system_properties.message_id, props
        put = PlainPut(header.topic, max(header.queue_id, 0), spec.body, header.properties or "", header.flag,
                       header.sys_flag, header.born_timestamp, _CALL.remote_addr, 0, _CLUSTER)
        if broker.encoder.plain(put) is None:
            (stored,) = put.messages(_STORE_HOST)
            result = broker.encoder.message(stored)
            assert not isinstance(result, PutMessageResult) or result.remark, result


def _handle(text: str) -> None:
    handle = ReceiptHandle.parse(text)
    assert ReceiptHandle.parse(handle.encode()) == handle, (text, handle)


async def _serve(broker: _Broker, req: Any) -> None:
    service = broker.service
    if isinstance(req, rpc.QueryRouteRequest):
        (await service.query_route(req, _CALL)).SerializeToString()
    elif isinstance(req, rpc.QueryAssignmentRequest):
        (await service.query_assignment(req, _CALL)).SerializeToString()
    elif isinstance(req, rpc.HeartbeatRequest):
        (await service.heartbeat(req, _CALL)).SerializeToString()
    elif isinstance(req, rpc.TelemetryCommand):
        session = service.open_session(_CALL)
        try:
            await service.on_telemetry(req, session, _CALL)
        finally:
            service.close_session(session)
        while (answer := await session.outgoing()) is not None:
            answer.SerializeToString()


def one_input(data: bytes) -> None:
    if not data:
        return
    method = METHODS[data[0] % len(METHODS)]
    req = GetMessageClass(method.input_type)()
    req.ParseFromString(data[1:])
    broker = _parts()
    if isinstance(req, rpc.SendMessageRequest):
        _send(broker, req)
    elif isinstance(req, rpc.ReceiveMessageRequest):
        requested_times(req, 60_000 if req.auto_renew else None, 15_000)
        broker.consumption._filter(req.message_queue.topic.name, req)  # the handler's own compile step
    elif isinstance(req, rpc.AckMessageRequest):
        for entry in req.entries:
            _handle(entry.receipt_handle)
    elif isinstance(req, rpc.ChangeInvisibleDurationRequest):
        invisible_duration_ms(req.invisible_duration)
        _handle(req.receipt_handle)
    elif isinstance(req, rpc.ForwardMessageToDeadLetterQueueRequest):
        _handle(req.receipt_handle)
    elif isinstance(req, rpc.EndTransactionRequest):
        offsets = decode_transaction_id(req.transaction_id)
        if offsets is not None:
            assert encode_transaction_id(*offsets) == req.transaction_id.upper(), (req.transaction_id, offsets)
    elif isinstance(req, rpc.RecallMessageRequest):
        try:
            RecallHandle.decode(req.recall_handle)
        except ValueError:
            pass  # the recall core's refusal: "recall handle is invalid"
    else:
        broker.loop.run_until_complete(_serve(broker, req))
