"""Producer: the user API over :class:`lakemq.client.sender.Sender`.

    async with Producer("my_group", namesrv_addr="127.0.0.1:9876") as producer:
        result = await producer.send(Message("T", b"hello"))

send (sync, with retries), send_async (a task, with an optional callback), send_oneway,
send_batch, and ordered sends through a MessageQueueSelector. Every message gets a UNIQ_KEY
(the msg id in SendResult); bodies of at least 4 KiB are zlib-compressed like the Java
client does, with the COMPRESSED sys flag.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Self

from lakemq.client.client_instance import ClientInstance
from lakemq.client.config import ClientConfig, ProducerConfig
from lakemq.client.message_id import create_uniq_id
from lakemq.client.results import SendResult
from lakemq.client.sender import DirectSend, PreparedMessage, Sender
from lakemq.common.aio import run_to_end
from lakemq.common.message import Message, MessageConst, MessageSysFlag, properties_to_string, tags_hash_code
from lakemq.common.message_batch import encode_messages
from lakemq.common.message_queue import MessageQueue
from lakemq.common.recall_handle import RecallHandle
from lakemq.common.validation import check_group, check_topic
from lakemq.errors import BrokerError, LakeMQError, MessageIllegalError, RemotingError
from lakemq.remoting.bodies import TopicRouteData
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import RecallMessageRequestHeader

__all__ = ["MessageQueueSelector", "Producer", "SendCallback", "select_by_hash"]

log = logging.getLogger(__name__)

MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
SendCallback = Callable[[SendResult | None, BaseException | None], None]


def select_by_hash(mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash: the same key always lands on the same queue."""
    return mqs[abs(tags_hash_code(str(arg))) % len(mqs)]


class Producer:
    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        namesrv_addr: str | None = None,
        config: ProducerConfig | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        self.group = check_group(group)
        self.config = replace(config or ProducerConfig(), producer_group=group)
        client = client_config or ClientConfig()
        self.client_config = replace(client, namesrv_addr=namesrv_addr) if namesrv_addr else client
        self._instance: ClientInstance | None = None
        self._sender: Sender | None = None
        self._pending: set[asyncio.Task[SendResult]] = set()

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self._instance is not None:
            return
        instance = ClientInstance.acquire(self.client_config)
        instance.register_producer(self)
        self._instance = instance
        self._sender = Sender(instance, self.group, self.config)
        await instance.start()

    async def shutdown(self) -> None:
        """Wait for the sends in flight, then leave the group; to the end even when the caller
        is cancelled."""
        instance, self._instance = self._instance, None
        if instance is not None:
            await run_to_end(self._shutdown(instance))

    async def _shutdown(self, instance: ClientInstance) -> None:
        try:
            await self._drain()
        finally:
            await instance.unregister(producer_group=self.group)
            await instance.release()

    async def _drain(self) -> None:
        """Wait for what is in flight before leaving the group."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- ClientInstance member ----------------------------------------------------------
    def publish_topics(self) -> list[str]:
        return list(self._sender.publish_info) if self._sender else []

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if self._sender is not None:
            self._sender.on_route(topic, route)

    # -- sending ------------------------------------------------------------------------
    @property
    def sender(self) -> Sender:
        if self._sender is None:
            raise LakeMQError("producer is not started")
        return self._sender

    def _prepare(self, msg: Message) -> PreparedMessage:
        self._check_and_stamp(msg)
        body, sys_flag = msg.body, 0
        if len(body) >= self.config.compress_msg_body_over_howmuch:
            body = zlib.compress(body, self.config.compress_level)
            sys_flag |= MessageSysFlag.COMPRESSED_FLAG
        return PreparedMessage(msg.topic, body, msg.flag, sys_flag, properties_to_string(msg.properties),
                               msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])

    def _check_and_stamp(self, msg: Message) -> None:
        """Refuse what the broker would, and give the message its UNIQ_KEY."""
        self._check_topic(msg.topic)
        self._check_body_and_stamp(msg)

    def _check_topic(self, topic: str) -> None:
        check_topic(topic)
        if topic == self.config.create_topic_key:
            raise MessageIllegalError(f"topic {topic} is reserved")

    def _check_body_and_stamp(self, msg: Message) -> None:
        if not msg.body:
            raise MessageIllegalError("message body is empty")
        if len(msg.body) > self.config.max_message_size:
            raise MessageIllegalError(
                f"message body is {len(msg.body)} bytes, the maximum is {self.config.max_message_size}")
        if MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in msg.properties:
            msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()

    def _prepare_batch(self, msgs: Sequence[Message]) -> PreparedMessage:
        if not msgs:
            raise MessageIllegalError("batch is empty")
        topic = msgs[0].topic
        self._check_topic(topic)  # once: every member's topic must be this one
        if topic.startswith("%RETRY%"):
            raise MessageIllegalError("retry-topic messages cannot be batched")
        for m in msgs:
            if m.topic != topic:
                raise MessageIllegalError("all messages of a batch must have the same topic")
            if m.delay_time_level > 0:
                raise MessageIllegalError("batch messages cannot be delayed")
            # Checked and stamped only: a batch's bodies go uncompressed (as in RocketMQ) and
            # its properties are written by encode_messages.
            self._check_body_and_stamp(m)
        body = encode_messages(msgs)
        if len(body) > self.config.max_message_size:
            raise MessageIllegalError(f"batch is {len(body)} bytes, the maximum is {self.config.max_message_size}")
        ids = ",".join(m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs)
        return PreparedMessage(topic, body, 0, 0, "", ids, batch=True)

    async def _to_queue(self, prepared: PreparedMessage, msg: Message, mq: MessageQueue | None,
                        selector: MessageQueueSelector | None, arg: Any) -> MessageQueue | None:
        if mq is not None:
            if mq.topic != prepared.topic:
                raise MessageIllegalError(f"message topic {prepared.topic} != queue topic {mq.topic}")
            return mq
        if selector is None:
            return None
        info = await self.sender.find_publish_info(prepared.topic)
        chosen = selector(list(info.queues), msg, arg)
        if chosen not in info.queues:
            raise LakeMQError(f"selector returned {chosen}, not a queue of {prepared.topic}")
        return chosen

    async def send(
        self, msg: Message, *, mq: MessageQueue | None = None, selector: MessageQueueSelector | None = None,
        arg: Any = None, timeout_ms: int | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. Without ``mq``/``selector``: up to
        retryTimesWhenSendFailed + 1 attempts; to a chosen queue: one attempt (order)."""
        return await self._send(msg, mq, selector, arg, timeout_ms, self.config.retry_times_when_send_failed + 1)

    async def _send(self, msg: Message, mq: MessageQueue | None, selector: MessageQueueSelector | None,
                    arg: Any, timeout_ms: int | None, attempts: int) -> SendResult:
        prepared = self._prepare(msg)
        timeout = timeout_ms or self.config.send_msg_timeout
        if mq is None and selector is None:
            direct = self.sender.first_attempt(prepared, attempts=attempts, timeout_ms=timeout)
            if direct is not None:
                return await self._send_direct(direct)
        target = await self._to_queue(prepared, msg, mq, selector, arg)
        if target is not None:
            return await self.sender.send_to_queue(prepared, target, timeout)
        return await self.sender.send_with_retries(prepared, attempts=attempts, timeout_ms=timeout)

    async def _send_direct(self, direct: DirectSend) -> SendResult:
        """The first attempt straight on the broker's connection (the route and the broker are
        known), as the blocking face makes it, without send_with_retries' layers of coroutines;
        what follows a failed first attempt is send_with_retries' (direct_retry)."""
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            response = await self.sender.instance.remoting.invoke(direct.addr, direct.request, direct.timeout_ms / 1000)
            result = self.direct_answered(direct, response, time.monotonic() - started)
        except (RemotingError, BrokerError) as exc:
            result, failure = None, exc
        if result is not None:
            return result
        return await self.direct_retry(direct, time.monotonic() - started, failure)

    # -- a blocking face's own transport (lakemq.client.sync) --------------------------------
    def direct_send(self, msg: Message, timeout_ms: int | None = None) -> DirectSend | None:
        """:meth:`send`'s first attempt (no queue or selector given) as a request a caller
        writes with its own transport, when making it needs no I/O (the route and broker are
        known); None: call send(). Safe from any thread."""
        return self.sender.first_attempt(self._prepare(msg), attempts=self.config.retry_times_when_send_failed + 1,
                                         timeout_ms=timeout_ms or self.config.send_msg_timeout)

    def direct_answered(self, direct: DirectSend, response: RemotingCommand, elapsed: float) -> SendResult | None:
        """The answer to a direct_send request: the send's result, or None when the retries
        must go on (:meth:`direct_retry`); BrokerError for a refusal (for direct_retry too)."""
        return self.sender.first_attempt_answered(direct, response, elapsed)

    async def direct_retry(self, direct: DirectSend, elapsed: float, failure: BaseException | None) -> SendResult:
        """What :meth:`send` does after its first attempt took ``elapsed`` seconds and failed
        with ``failure`` (None: it returned a status to retry past)."""
        return await self.sender.send_with_retries(direct.msg, attempts=direct.attempts, timeout_ms=direct.timeout_ms,
                                                   first=(direct.mq, elapsed, failure))

    def send_async(
        self, msg: Message, callback: SendCallback | None = None, *, mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None, arg: Any = None, timeout_ms: int | None = None,
    ) -> asyncio.Task[SendResult]:
        """Start sending; returns a task to await, and calls ``callback(result, error)``
        when given. Retries retryTimesWhenSendAsyncFailed times."""
        task = asyncio.create_task(self._send(msg, mq, selector, arg, timeout_ms,
                                              self.config.retry_times_when_send_async_failed + 1))
        self._pending.add(task)

        def done(t: asyncio.Task[SendResult]) -> None:
            self._pending.discard(t)
            if callback is None:
                if not t.cancelled() and t.exception() is not None:
                    log.debug("async send failed: %s", t.exception())
                return
            if t.cancelled():
                callback(None, asyncio.CancelledError())
            else:
                exc = t.exception()
                callback(None if exc else t.result(), exc)

        task.add_done_callback(done)
        return task

    async def send_oneway(self, msg: Message, *, mq: MessageQueue | None = None,
                          selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Fire and forget: one attempt, no answer, no retry."""
        prepared = self._prepare(msg)
        target = await self._to_queue(prepared, msg, mq, selector, arg)
        if target is None:
            info = await self.sender.find_publish_info(prepared.topic)
            target = self.sender.select_queue(info, None)
        await self.sender.send_oneway_to_queue(prepared, target)

    async def send_batch(self, msgs: Sequence[Message], *, mq: MessageQueue | None = None,
                         timeout_ms: int | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE: all to one queue, stored together; msg_id joins the ids."""
        prepared = self._prepare_batch(msgs)
        timeout = timeout_ms or self.config.send_msg_timeout
        if mq is not None:
            return await self.sender.send_to_queue(prepared, mq, timeout)
        return await self.sender.send_with_retries(
            prepared, attempts=self.config.retry_times_when_send_failed + 1, timeout_ms=timeout)

    async def recall_message(self, topic: str, recall_handle: str) -> str:
        """Cancel a timer message before it is due, by the handle its SendResult carries
        (RocketMQ 5's recallMessage); returns its message id. BrokerError says why not
        (already delivered, already recalled, unknown); ValueError for a malformed handle."""
        handle = RecallHandle.decode(recall_handle)
        addr = await self.sender.instance.broker_addr(handle.broker_name, topic)
        header = RecallMessageRequestHeader(topic, recall_handle, self.group, handle.broker_name)
        return await self.sender.instance.api.recall_message(addr, header)

    # -- queries ------------------------------------------------------------------------
    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return list((await self.sender.find_publish_info(topic)).queues)

    async def create_topic(self, topic: str, queue_nums: int = 4, *, order: bool = False) -> None:
        """Create ``topic`` on every master broker that serves TBW102 (RocketMQ's createTopic)."""
        check_topic(topic)
        route = await self.sender.instance.update_route(self.config.create_topic_key)
        if route is None:
            raise LakeMQError(f"no broker serves {self.config.create_topic_key}; cannot create {topic}")
        for broker in route.broker_datas:
            if broker.master_addr:
                await self.sender.instance.api.create_topic(
                    broker.master_addr, topic, default_topic=self.config.create_topic_key,
                    read_queue_nums=queue_nums, write_queue_nums=queue_nums, order=order)
