"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (RocketMQ SendMessageProcessor).

Refusals are raised as BrokerError (for_code); the dispatcher answers them with their code.

Checks (broker and topic permissions, system topics, queue id), creates a missing topic from
the producer's default topic (TBW102) when auto-creation is on, routes retry messages past
their group's max reconsume times to the group's DLQ, stores a TRAN_MSG=true send as a half
message (lakemq.broker.transaction), then puts and maps the store's
PutMessageStatus to a response code. A put to a known topic is a copy into the mapped
CommitLog and is done on the event loop; a put that writes files (a topic or a DLQ config
created) runs in the send pool with its fast failure, and so does every SYNC_FLUSH put on a
device where an append may wait for the flush's writeback (stable pages:
lakemq.store.device). Under SYNC_FLUSH no thread waits for the disk: the reply waits on the
loop for the group commit, which watches the commit thread's eventfd and acknowledges each
fdatasync's puts itself (lakemq.broker.loop_acks; docs/SYNC_FLUSH.md).
Under SYNC_MASTER a reply waits the same way for a slave to have the message
(docs/REPLICATION.md); a SLAVE refuses every send.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable
from typing import Final

from lakemq.broker._send_path import PlainSends
from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.config import BrokerConfig
from lakemq.broker.loop_acks import LoopAcks
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.processor.recall_processor import recall_handle_of
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    TopicConfigManager,
    dlq_topic,
)
from lakemq.broker.transaction.half_message import is_transactional, to_half_message
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageExtBrokerInner,
    without_wait_true,
)
from lakemq.common.validation import is_valid_name
from lakemq.errors import for_code
from lakemq.remoting.codec import DEFAULT_VERSION, FLAG_RESPONSE, LanguageCode, RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import SendMessageRequestHeader, decode_send_header
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.config import FlushDiskType
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import BatchPut, MessagesPut, PlainPut, PutRequest
from lakemq.store.results import PutMessageResult, PutMessageStatus

__all__ = ["SendMessageProcessor"]

log = logging.getLogger(__name__)

PROPERTY_CLUSTER: Final = "CLUSTER"
DEFAULT_REGION: Final = "DefaultRegion"

# PutMessageStatus -> (response code, remark); the first three still carry the send result.
_STATUS_REPLY: Final = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (
        ResponseCode.FLUSH_DISK_TIMEOUT,
        "stored, but not flushed to disk in time",
    ),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        "stored, but not replicated in time",
    ),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (
        ResponseCode.SLAVE_NOT_AVAILABLE,
        "stored, but the slave is not available",
    ),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, msg properties length limit exceeded.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now, maybe disk full or the broker is stopping.",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}
_PUT_OK_REPLY: Final = _STATUS_REPLY[PutMessageStatus.PUT_OK]
# What the compiled send answers for a reply that comes later (the dispatcher writes nothing).
_LATER: Final = object()
# Only a send whose properties hold this pair can be a transaction's half (TRAN_MSG=true).
_TRANSACTION_PAIR: Final = MessageConst.TRANSACTION_PREPARED + NAME_VALUE_SEPARATOR
# A send whose properties hold this may be a timer message (the store decides).
_TIMER: Final = "TIMER_"
_STORED: Final = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class _AwaitedSend:
    """A plain send appended on the loop whose put waits for its acknowledgement (SYNC_FLUSH,
    SYNC_MASTER): the store's token for it. LoopAcks calls :meth:`reply` with the status and
    writes the answers one release makes for a connection in one write."""

    __slots__ = ("_plain", "ctx", "queue_id", "request", "result", "started", "topic")

    def __init__(self, plain: PlainSends, ctx: RequestContext, request: RemotingCommand) -> None:
        self._plain = plain
        self.ctx = ctx
        self.request = request
        # Set once the put came back pending (_answer_later), before any release can run.
        self.topic = ""
        self.queue_id = 0
        self.result: PutMessageResult | None = None
        self.started = 0.0

    def reply(self, status: PutMessageStatus) -> tuple[RemotingConnection, RemotingCommand]:
        assert self.result is not None
        return self.ctx.connection, self._plain.acknowledged(self.ctx, self.request, self.topic, self.queue_id,
                                                             self.result, self.started, status)


class SendMessageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        pool: BusinessPool,
        metrics: BrokerMetrics,
    ) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._pool = pool
        self._record_send = metrics.sends.record
        self._page_cache_busy = metrics.flow_control_rejections.labels(config.broker_name, "page_cache_busy")
        # Appends go to the send pool only where one may wait for the disk: under SYNC_FLUSH
        # the CommitLog's last page is under writeback for most of every fdatasync.
        self._append_in_pool = (store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
                                and store.appends_may_wait)
        # Puts wait for the store's acknowledgement (PutAcks): SYNC_FLUSH, SYNC_MASTER or both.
        self._acked = store.commit_log.acks is not None
        self._slave = store.is_slave
        self._acks: LoopAcks | None = None  # made on the loop by the first acknowledged send
        # Every stored message carries its broker's cluster (RocketMQ's CLUSTER property).
        self._cluster_suffix = (
            f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{config.broker_cluster_name}{PROPERTY_SEPARATOR}"
        ).encode()
        self._plain = PlainSends(
            topics.select_topic_config, config, PermName.is_writeable, is_valid_name, NOT_ALLOWED_SEND_TOPICS,
            RETRY_GROUP_TOPIC_PREFIX, _TRANSACTION_PAIR, MessageConst.WAIT_STORE_MSG_OK, without_wait_true,
            PlainPut, store.put, self._cluster_suffix, PutMessageStatus.PUT_OK, self._record_send, self._reply,
            self._answer_later, RemotingCommand, LanguageCode.PYTHON, DEFAULT_VERSION, MessageConst.MSG_REGION, DEFAULT_REGION,
            MessageConst.TRACE_SWITCH, "true")

    def close(self) -> None:
        """On the loop, once no send is taken any more."""
        if self._acks is not None:
            self._acks.close()

    def reject_request(self) -> bool:
        busy = self._store.commit_log.is_os_page_cache_busy()
        if busy:
            self._page_cache_busy.inc()
        return busy

    def process_request(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        if request.code == RequestCode.SEND_MESSAGE_V2 and not self._append_in_pool:
            # A plain send to a known topic, appended on the loop in compiled code
            # (lakemq/broker/_send_path.pyx); None when it took nothing: everything else is
            # decided below. A put that waits for a slave (SYNC_MASTER) is answered later.
            awaited = _AwaitedSend(self._plain, ctx, request) if self._acked else None
            response = self._plain.send(ctx, request, None if awaited is None else self._loop_acks(), awaited)
            if response is _LATER:
                return None
            if isinstance(response, RemotingCommand):
                return response
        header = decode_send_header(request)
        # A put to a known topic only copies into the mapped CommitLog, so it is done right
        # here on the loop: two thread hops cost more than the put. A put that writes files
        # (creating a topic, a retry group's DLQ), or that may wait for writeback, runs in the
        # send pool, where a slow store meets the queue-time fast failure instead of stalling
        # the loop. A reply that waits for its acknowledgement (SYNC_FLUSH, SYNC_MASTER)
        # waits on the loop, holding no thread.
        if self._put_on_loop(header):
            ack = self._ack_future()
            queue_id, result, started, recall = self._store_send(ctx.remote_addr, self._is_batch(request),
                                                                 request.body, header, ack)
            if result.pending:
                assert ack is not None
                return self._acknowledged(ctx, request, header, queue_id, result, started, ack, recall)
            return self._reply(ctx, request, header.topic, queue_id, result, started, recall)
        return self._send_pooled(ctx, request, header)

    async def _acknowledged(
        self, ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int,
        result: PutMessageResult, started: float, ack: asyncio.Future[PutMessageStatus], recall: str | None,
    ) -> RemotingCommand:
        """Appended on the loop, answered once the store acknowledged it (flushed, a slave has it)."""
        return self._reply(ctx, request, header.topic, queue_id, result.acknowledged(await ack), started, recall)

    async def _send_pooled(
        self, ctx: RequestContext, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand:
        ack = self._ack_future()
        queue_id, result, started, recall = await self._pool.run(
            lambda: self._store_send(ctx.remote_addr, self._is_batch(request), request.body, header, ack))
        if result.pending:  # answered by the store's PutAcks, which owns the deadline
            assert ack is not None
            result = result.acknowledged(await ack)
        return self._reply(ctx, request, header.topic, queue_id, result, started, recall)

    def _put_on_loop(self, header: SendMessageRequestHeader) -> bool:
        """A put to a known topic that may not wait for writeback is done on the loop."""
        return (not self._append_in_pool and not header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                and self._topics.select_topic_config(header.topic) is not None)

    @staticmethod
    def _is_batch(request: RemotingCommand) -> bool:
        return request.code == RequestCode.SEND_BATCH_MESSAGE

    @staticmethod
    def _answer_later(ctx: RequestContext, request: RemotingCommand, topic: str, queue_id: int,
                      result: PutMessageResult, started: float, awaited: _AwaitedSend) -> object:
        """A compiled plain send whose put waits for its acknowledgement: LoopAcks answers it
        on the loop, without a task (the dispatcher writes nothing now)."""
        awaited.topic, awaited.queue_id, awaited.result, awaited.started = topic, queue_id, result, started
        return _LATER

    def _loop_acks(self) -> LoopAcks:
        """The sink of puts that wait for an acknowledgement (made on the loop, at first use)."""
        acks = self._acks
        if acks is None:
            store = self._store
            acks = self._acks = LoopAcks(asyncio.get_running_loop(), store.open_ack_watch, store.flush_inline,
                                         store.flush_now)
        return acks

    def _ack_future(self) -> asyncio.Future[PutMessageStatus] | None:
        """When puts wait for an acknowledgement, the future the store's completes (on the loop)."""
        return self._loop_acks().future() if self._acked else None

    async def send_message(
        self, remote_addr: str, header: SendMessageRequestHeader, body: bytes
    ) -> tuple[int, PutMessageResult, str | None]:
        """One message sent through another protocol face (the gRPC front door,
        lakemq.broker.grpc): the same checks, rewrites (transaction halves, DLQ) and put as a
        SEND_MESSAGE_V2, run where that send would run (on the loop, or in the send pool), and
        answered once the store acknowledged it. Returns the queue id the reply names, the
        store's final result and a timer message's recall handle; a refusal raises BrokerError with RocketMQ's response code."""
        if self.reject_request():  # the flow control the remoting dispatcher applies first
            raise for_code(ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]system busy, start flow control for a while")
        ack = self._ack_future()
        if self._put_on_loop(header):
            queue_id, result, started, recall = self._store_send(remote_addr, False, body, header, ack)
        else:
            queue_id, result, started, recall = await self._pool.run(
                lambda: self._store_send(remote_addr, False, body, header, ack))
        if result.pending:
            assert ack is not None
            result = result.acknowledged(await ack)
        append = result.append_result
        if append is not None and result.status in _STORED:
            self._record_send(header.topic, append.msg_num, append.body_bytes, time.perf_counter() - started)
        return queue_id, result, recall

    def _store_send(
        self, remote_addr: str, batch: bool, body: bytes, header: SendMessageRequestHeader,
        ack: asyncio.Future[PutMessageStatus] | None,
    ) -> tuple[int, PutMessageResult, float, str | None]:
        """Check, then store: (the queue id the reply names, the store's result, when the
        put started, the recall handle of a timer message). With ``ack`` a put that waits
        comes back pending and ``ack`` gets its status."""
        topic_config = self._msg_check(remote_addr, header)
        started = time.perf_counter()
        put, queue_id = self._put_request(remote_addr, batch, body, header, topic_config)
        result = self._store.put(put, self._acks if ack is not None else None, ack)
        recall = recall_handle_of(self._config.broker_name, put.messages[0], result) \
            if isinstance(put, MessagesPut) else None
        return queue_id, result, started, recall

    def _put_request(
        self, remote_addr: str, batch: bool, body: bytes, header: SendMessageRequestHeader,
        topic_config: TopicConfig,
    ) -> tuple[PutRequest, int]:
        """What the store puts, and the queue id the reply names. A send is handed over as its
        parts and a batch as its body (the store builds message objects only when it must);
        a retry message (its DLQ) and a transaction's half are the broker's own rewrites."""
        if batch or header.batch:
            batch_put = self._batch(remote_addr, header, topic_config, body)
            return batch_put, batch_put.queue_id
        queue_id = self._queue_id(header, topic_config)
        properties = header.properties or ""
        if MessageConst.WAIT_STORE_MSG_OK in properties:  # as RocketMQ: WAIT=true is not stored
            properties = without_wait_true(properties)
        plain = PlainPut(header.topic, queue_id, body, properties, header.flag, header.sys_flag,
                         header.born_timestamp, remote_addr, header.reconsume_times or 0, self._cluster_suffix)
        if (not header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and _TRANSACTION_PAIR not in properties
                and _TIMER not in properties):
            return plain, queue_id
        (msg,) = plain.messages(self._store.store_host)  # the store times a timer message in place
        self._retry_or_dlq(header, msg)
        if is_transactional(msg):
            to_half_message(msg)
            # A half message answers with the queue the producer asked for, as RocketMQ does.
            return MessagesPut.of(msg), int(msg.properties[MessageConst.REAL_QUEUE_ID])
        return MessagesPut.of(msg), msg.queue_id

    # -- checks ------------------------------------------------------------------------

    def _msg_check(self, remote_addr: str, header: SendMessageRequestHeader) -> TopicConfig:
        c = self._config
        topic = header.topic
        if self._slave:  # before anything is created: a slave's topics are its master's
            raise for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                           f"the broker[{c.broker_name}, id {c.broker_id}] is a SLAVE: send to its master")
        if not PermName.is_writeable(c.broker_permission):
            raise for_code(
                ResponseCode.NO_PERMISSION, f"the broker[{c.broker_ip1}] sending message is forbidden"
            )
        if not is_valid_name(topic):
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"the topic[{topic}] is invalid: use letters, digits, "
                "'%', '|', '_' and '-', at most 127 characters",
            )
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise for_code(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        topic_config = self._topics.select_topic_config(topic)
        if topic_config is None and header.default_topic:
            topic_config = self._topics.create_topic_in_send_message_method(
                topic, header.default_topic, header.default_topic_queue_nums
            )
        if topic_config is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic_config = self._topics.create_topic_in_send_message_back_method(
                topic, 1, PermName.PERM_WRITE | PermName.PERM_READ
            )
        if topic_config is None:
            raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not PermName.is_writeable(topic_config.perm):
            raise for_code(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        valid_ids = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        if header.queue_id >= valid_ids:
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{header.queue_id}] is illegal, {topic_config} Producer: {remote_addr}",
            )
        return topic_config

    def _queue_id(self, header: SendMessageRequestHeader, topic_config: TopicConfig) -> int:
        if header.queue_id >= 0:
            return header.queue_id
        if topic_config.write_queue_nums <= 0:
            raise for_code(ResponseCode.NO_PERMISSION, f"topic[{topic_config.topic_name}] has no write queue")
        return random.randrange(topic_config.write_queue_nums)

    def _retry_or_dlq(self, header: SendMessageRequestHeader, msg: MessageExtBrokerInner) -> None:
        """A retry message over its group's max reconsume times goes to ``%DLQ%group``."""
        if not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return
        group = msg.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_config = self._groups.find_subscription_group_config(group)
        if group_config is None:
            raise for_code(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        max_times = (
            header.max_reconsume_times
            if header.max_reconsume_times is not None
            else group_config.retry_max_times
        )
        if (header.reconsume_times or 0) <= max_times:
            return
        dlq = self._topics.create_topic_in_send_message_back_method(
            dlq_topic(group), 1, PermName.PERM_WRITE | PermName.PERM_READ
        )
        log.info(
            "message of group %s reconsumed %d times > %d: to %s",
            group,
            header.reconsume_times,
            max_times,
            dlq.topic_name,
        )
        msg.topic, msg.queue_id = dlq.topic_name, 0

    # -- building ----------------------------------------------------------------------

    def _batch(
        self, remote_addr: str, header: SendMessageRequestHeader, topic_config: TopicConfig, body: bytes
    ) -> BatchPut:
        """The checks every batch gets, and what its messages share."""
        if header.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise for_code(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
        if len(body) > self._store.config.max_message_size:
            raise for_code(
                ResponseCode.MESSAGE_ILLEGAL,
                f"batch body of {len(body)} bytes exceeds maxMessageSize "
                f"{self._store.config.max_message_size}",
            )
        return BatchPut(header.topic, self._queue_id(header, topic_config), body, self._cluster_suffix,
                        header.sys_flag, header.born_timestamp, remote_addr, header.reconsume_times or 0)

    # -- reply -------------------------------------------------------------------------

    def _reply(
        self, ctx: RequestContext, request: RemotingCommand, topic: str, queue_id: int, result: PutMessageResult,
        started: float, recall_handle: str | None = None,
    ) -> RemotingCommand:
        """The answer to a stored send (``started``: time.perf_counter() when its put began)."""
        status = result.status
        code, remark = _PUT_OK_REPLY if status is PutMessageStatus.PUT_OK else _STATUS_REPLY[status]
        if result.remark:
            remark = f"{remark} ({result.remark})" if remark else result.remark
        append = result.append_result
        if append is None or (status is not PutMessageStatus.PUT_OK and status not in _STORED):
            log.warning(
                "send to %s from %s refused: %s %s", topic, ctx.remote_addr, result.status.name, remark
            )
            return request.reply(code, remark)
        self._record_send(topic, append.msg_num, append.body_bytes, time.perf_counter() - started)
        # SendMessageResponseHeader's fields, written out: this runs for every send.
        fields = {"msgId": append.msg_id, "queueId": str(queue_id), "queueOffset": str(append.logics_offset),
                  MessageConst.MSG_REGION: DEFAULT_REGION, MessageConst.TRACE_SWITCH: "true"}
        if recall_handle is not None:
            fields["recallHandle"] = recall_handle
        return RemotingCommand(code, opaque=request.opaque, flag=FLAG_RESPONSE, remark=remark,
                               ext_fields=fields,
                               serialize_type=request.serialize_type)
