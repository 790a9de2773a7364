"""Blocking faces over the asyncio clients, like httpx.Client over its async core.

Each facade runs its async object on one shared background event-loop thread and blocks on
the result; no client logic is repeated here. Listeners registered through a sync consumer
are plain functions and run in worker threads.

A SyncProducer's send has a direct path as well, as httpx's blocking client has its own
transport: when the async core can make the send's first attempt without I/O (the topic's route
and broker known: Producer.direct_send), the calling thread writes it and reads the answer on a
blocking connection of its own (lakemq.remoting.blocking), with the same codec, instead of
handing the send to the loop's thread and waiting for it there. Anything after that first
attempt (retries, a route to look up) goes through the loop as before.

    with SyncProducer("g", namesrv_addr=addr) as producer:
        producer.send(Message("T", b"hi"))
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from lakemq.client.producer import MessageQueueSelector, Producer, SendCallback
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.push_consumer import PushConsumer
from lakemq.client.results import PullResult, SendResult
from lakemq.client.sender import DirectSend
from lakemq.client.transaction_producer import TransactionListener, TransactionProducer, TransactionSendResult
from lakemq.common.message import Message
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, LakeMQError, RemotingError
from lakemq.remoting import event_loop
from lakemq.remoting.blocking import BlockingConnection

__all__ = ["SyncProducer", "SyncPullConsumer", "SyncPushConsumer", "SyncTransactionProducer", "background_loop"]

T = TypeVar("T")

_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The shared loop thread (a daemon, started on first use, stopped at exit)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.is_closed():
            loop = event_loop.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="lakemq-client-loop", daemon=True)
            thread.start()
            atexit.register(loop.call_soon_threadsafe, loop.stop)
            _LOOP = loop
        return _LOOP


def _run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    return asyncio.run_coroutine_threadsafe(coro, background_loop()).result(timeout)


class _Facade:
    _core: Any

    def start(self) -> None:
        _run(self._core.start())

    def shutdown(self) -> None:
        _run(self._core.shutdown())

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class SyncProducer(_Facade):
    def __init__(self, group_or_producer: str | Producer = "DEFAULT_PRODUCER", **kwargs: Any) -> None:
        self._core = group_or_producer if isinstance(group_or_producer, Producer) else Producer(group_or_producer, **kwargs)
        self.producer: Producer = self._core
        # Each thread's blocking connections, by broker address; all of them, to close at shutdown.
        self._local = threading.local()
        self._connections: list[BlockingConnection] = []
        self._connections_lock = threading.Lock()

    def send(self, msg: Message, *, mq: MessageQueue | None = None, selector: MessageQueueSelector | None = None,
             arg: Any = None, timeout_ms: int | None = None) -> SendResult:
        if mq is None and selector is None:
            direct = self.producer.direct_send(msg, timeout_ms)
            if direct is not None:
                return self._send_direct(direct)
        return _run(self.producer.send(msg, mq=mq, selector=selector, arg=arg, timeout_ms=timeout_ms))

    def _send_direct(self, direct: DirectSend) -> SendResult:
        """The first attempt on this thread's connection; the rest, if any, on the loop."""
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            response = self._connection(direct.addr).invoke(direct.request, direct.timeout_ms / 1000)
            result = self.producer.direct_answered(direct, response, time.monotonic() - started)
        except (RemotingError, BrokerError) as exc:
            result, failure = None, exc
        if result is not None:
            return result
        return _run(self.producer.direct_retry(direct, time.monotonic() - started, failure))

    def _connection(self, addr: str) -> BlockingConnection:
        connections: dict[str, BlockingConnection] | None = getattr(self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
        connection = connections.get(addr)
        if connection is None or not connection.is_open:
            connection = connections[addr] = BlockingConnection(addr)
            with self._connections_lock:
                self._connections = [c for c in self._connections if c.is_open] + [connection]
        return connection

    def shutdown(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        super().shutdown()

    def send_async(self, msg: Message, callback: SendCallback | None = None, **kwargs: Any) -> concurrent.futures.Future[SendResult]:
        """Returns at once; the future (and ``callback``, on the loop thread) get the result."""

        async def go() -> SendResult:
            return await self.producer.send_async(msg, callback, **kwargs)

        return asyncio.run_coroutine_threadsafe(go(), background_loop())

    def send_oneway(self, msg: Message, **kwargs: Any) -> None:
        _run(self.producer.send_oneway(msg, **kwargs))

    def recall_message(self, topic: str, recall_handle: str) -> str:
        """Producer.recall_message."""
        return _run(self.producer.recall_message(topic, recall_handle))

    def send_batch(self, msgs: Sequence[Message], **kwargs: Any) -> SendResult:
        return _run(self.producer.send_batch(msgs, **kwargs))

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return _run(self.producer.fetch_publish_message_queues(topic))

    def create_topic(self, topic: str, queue_nums: int = 4, *, order: bool = False) -> None:
        _run(self.producer.create_topic(topic, queue_nums, order=order))


class SyncPushConsumer(_Facade):
    def __init__(self, group_or_consumer: str | PushConsumer, **kwargs: Any) -> None:
        self._core = group_or_consumer if isinstance(group_or_consumer, PushConsumer) \
            else PushConsumer(group_or_consumer, **kwargs)
        self.consumer: PushConsumer = self._core
        self.subscribe = self.consumer.subscribe
        self.register_message_listener_concurrently = self.consumer.register_message_listener_concurrently
        self.register_message_listener_orderly = self.consumer.register_message_listener_orderly

    def owned_queues(self) -> list[MessageQueue]:
        async def owned() -> list[MessageQueue]:
            return self.consumer.owned_queues()

        return _run(owned())


class SyncPullConsumer(_Facade):
    def __init__(self, group_or_consumer: str | PullConsumer, **kwargs: Any) -> None:
        self._core = group_or_consumer if isinstance(group_or_consumer, PullConsumer) \
            else PullConsumer(group_or_consumer, **kwargs)
        self.consumer: PullConsumer = self._core

    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        return _run(self.consumer.fetch_subscribe_message_queues(topic))

    def pull(self, mq: MessageQueue, sub_expression: str | None, offset: int, max_nums: int, **kwargs: Any) -> PullResult:
        return _run(self.consumer.pull(mq, sub_expression, offset, max_nums, **kwargs))

    def pull_block_if_not_found(self, mq: MessageQueue, sub_expression: str | None, offset: int,
                                max_nums: int) -> PullResult:
        return _run(self.consumer.pull_block_if_not_found(mq, sub_expression, offset, max_nums))

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        async def update() -> None:
            self.consumer.update_consume_offset(mq, offset)

        _run(update())

    def fetch_consume_offset(self, mq: MessageQueue, *, from_store: bool = False) -> int:
        return _run(self.consumer.fetch_consume_offset(mq, from_store=from_store))

    def min_offset(self, mq: MessageQueue) -> int:
        return _run(self.consumer.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return _run(self.consumer.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return _run(self.consumer.search_offset(mq, timestamp_ms))


class SyncTransactionProducer(SyncProducer):
    """The blocking face; the listener's plain methods run in worker threads."""

    def __init__(
        self,
        group_or_producer: str | TransactionProducer,
        listener: TransactionListener | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(group_or_producer, TransactionProducer):
            core = group_or_producer
        elif listener is None:
            raise LakeMQError("a transaction producer needs a TransactionListener")
        else:
            core = TransactionProducer(group_or_producer, listener, **kwargs)
        super().__init__(core)
        self.producer: TransactionProducer = core

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        return _run(self.producer.send_message_in_transaction(msg, arg))
