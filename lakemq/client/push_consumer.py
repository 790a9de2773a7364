"""PushConsumer: messages delivered to a listener; a wrapper over pulling.

    consumer = PushConsumer("g", namesrv_addr=addr)
    consumer.subscribe("T", "tagA || tagB")
    consumer.register_message_listener_concurrently(on_messages)
    await consumer.start()

Rebalance decides the owned queues; the fetcher runs a long-polling pull loop per owned queue
(see :mod:`lakemq.client.fetcher`) feeding the consume service. Clustering consumers also read
their group's retry topic, where RECONSUME_LATER messages come back. A consumer may start
before its topics exist: it consumes a topic from the moment the route refresh finds it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Self

from lakemq.client.config import ClientConfig, ConsumerConfig, MessageModel
from lakemq.client.consume_service import (
    ConcurrentConsumeService,
    ConcurrentListener,
    OrderlyConsumeService,
    OrderlyListener,
)
from lakemq.client.consumer_core import ConsumerCore, retry_topic
from lakemq.client.fetcher import Fetcher
from lakemq.client.process_queue import ProcessQueue
from lakemq.client.rebalance import Rebalancer
from lakemq.client.subscription import MessageSelector, build_subscription
from lakemq.common.aio import cancel_and_wait, run_to_end
from lakemq.common.message import MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import ExpressionType, SubscriptionData
from lakemq.common.validation import check_topic
from lakemq.errors import BrokerError, LakeMQError, RemotingError
from lakemq.remoting.bodies import ConsumerData, TopicRouteData

__all__ = ["PushConsumer"]

log = logging.getLogger(__name__)

LOCK_RENEW_INTERVAL = 20.0


class PushConsumer:
    def __init__(self, group: str, *, namesrv_addr: str | None = None, config: ConsumerConfig | None = None,
                 client_config: ClientConfig | None = None) -> None:
        self.core = ConsumerCore(group, config, client_config, namesrv_addr)
        self.group = self.core.group
        self.config = self.core.config
        self.subscriptions: dict[str, SubscriptionData] = {}
        self._concurrent: ConcurrentListener | None = None
        self._orderly: OrderlyListener | None = None
        self._service: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._rebalancer: Rebalancer | None = None
        self._fetcher: Fetcher | None = None
        self._lock_task: asyncio.Task[None] | None = None

    # -- configuration ------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector | None = "*",
                  expression_type: str = ExpressionType.TAG) -> None:
        """``expression``: a tag expression (``"tagA || tagB"``, ``"*"``) or a MessageSelector
        (``MessageSelector.by_sql("a > 5")``); a bad SQL92 expression raises here."""
        self.subscriptions[check_topic(topic)] = build_subscription(topic, expression, expression_type)

    def register_message_listener_concurrently(self, listener: ConcurrentListener) -> None:
        self._concurrent, self._orderly = listener, None

    def register_message_listener_orderly(self, listener: OrderlyListener) -> None:
        self._orderly, self._concurrent = listener, None

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self.core.started:
            return
        if not self.subscriptions:
            raise LakeMQError(f"consumer {self.group} subscribes to nothing")
        if self._concurrent is None and self._orderly is None:
            raise LakeMQError(f"consumer {self.group} has no message listener")
        if self.config.message_model is MessageModel.CLUSTERING:
            self.subscriptions.setdefault(retry_topic(self.group), build_subscription(retry_topic(self.group), "*"))
        orderly = self._orderly is not None
        fetcher = self._fetcher = Fetcher(self.core, self.subscriptions, self._submit, self._drop, orderly=orderly)
        self._rebalancer = Rebalancer(self.core, orderly=orderly, start_pull=fetcher.start,
                                      subscribed_topics=self.subscribed_topics)
        if self._orderly is not None:
            self._service = OrderlyConsumeService(self.core, self._orderly, self._rebalancer, self._send_back)
        else:
            assert self._concurrent is not None
            self._service = ConcurrentConsumeService(self.core, self._concurrent, self._send_back)
        instance = await self.core.open(self)
        for topic in self.subscribed_topics():
            try:
                await instance.update_route(topic)
            except (RemotingError, BrokerError) as exc:
                log.warning("route of %s: %s", topic, exc)
        # As RocketMQ's consumer: a topic that does not exist yet is consumed once it appears
        # (the route refresh finds it, then heartbeat and rebalance follow at once).
        await instance.send_heartbeat_to_all()
        if orderly and self.config.message_model is MessageModel.CLUSTERING:
            self._lock_task = asyncio.create_task(self._renew_locks())
        instance.wake_rebalance()

    async def shutdown(self, await_termination: float = 10.0) -> None:
        """Stop pulling, let running listeners finish (up to ``await_termination`` s), persist
        the offsets, and leave the group. It runs to its end even when the caller is cancelled
        or a step fails: the group's other members get this consumer's queues only once it
        has left."""
        if self.core.started:
            await run_to_end(self._shutdown(await_termination))

    async def _shutdown(self, await_termination: float) -> None:
        assert self._fetcher is not None and self._service is not None and self._rebalancer is not None
        try:
            if self._lock_task is not None:
                await cancel_and_wait(self._lock_task)
            await self._fetcher.stop()
            await self._service.shutdown(await_termination)
            await self.persist_offsets()
            await self._rebalancer.drop_all()
        finally:
            await self.core.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- ClientInstance member ----------------------------------------------------------
    def subscribed_topics(self) -> list[str]:
        return sorted(self.subscriptions)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        """Rebalance reads routes from the instance."""

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_PASSIVELY", self.config.message_model.value,
                            self.config.consume_from_where.value,
                            tuple(s for _, s in sorted(self.subscriptions.items())))

    async def do_rebalance(self) -> None:
        if self._rebalancer is not None and self.core.started and not (self._fetcher and self._fetcher.stopping):
            await self._rebalancer.do_rebalance()

    async def persist_offsets(self) -> None:
        if self._rebalancer is not None and self.core.started:
            await self.core.offset_store.persist_all(self._rebalancer.owned())

    def owned_queues(self) -> list[MessageQueue]:
        return self._rebalancer.owned() if self._rebalancer else []

    def _submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        assert self._service is not None
        self._service.submit(msgs, pq, mq)

    async def _drop(self, mq: MessageQueue) -> None:
        assert self._rebalancer is not None
        await self._rebalancer.drop(mq)

    async def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker re-delivers ``msg`` through the retry topic
        after a delay. False when the broker refused or cannot, so the client retries locally."""
        instance = self.core.instance
        try:
            addr = await instance.broker_addr(mq.broker_name, mq.topic)
            await instance.api.consumer_send_msg_back(
                addr, commit_log_offset=msg.commit_log_offset, group=self.group, delay_level=delay_level,
                origin_msg_id=msg.msg_id, origin_topic=msg.topic, max_reconsume_times=self.config.max_reconsume_times)
        except (RemotingError, BrokerError, LakeMQError) as exc:
            log.warning("send-back of %s failed (%s); retrying it locally", msg.msg_id, exc)
            return False
        return True

    async def _renew_locks(self) -> None:
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL)
            if self._rebalancer is not None:
                await self._rebalancer.lock_all()

