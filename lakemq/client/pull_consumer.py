"""PullConsumer: the application picks queues and offsets itself (DefaultMQPullConsumer).

    async with PullConsumer("g", namesrv_addr=addr) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues("T"):
            result = await consumer.pull(mq, "*", await consumer.fetch_consume_offset(mq), 32)

Offsets the application reports with :meth:`update_consume_offset` are persisted to the
broker every 5 s and on shutdown (to a local file in broadcasting mode).
"""

from __future__ import annotations

from typing import Self

from lakemq.client.client_api import RawPullResult
from lakemq.client.config import ClientConfig, ConsumerConfig
from lakemq.client.consumer_core import ConsumerCore
from lakemq.client.offset_store import ReadOffsetType
from lakemq.client.results import PullResult
from lakemq.client.subscription import MessageSelector, build_subscription
from lakemq.common.aio import run_to_end
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import ExpressionType
from lakemq.common.validation import check_topic
from lakemq.remoting.bodies import ConsumerData, TopicRouteData

__all__ = ["PullConsumer"]


class PullConsumer:
    def __init__(self, group: str, *, namesrv_addr: str | None = None, config: ConsumerConfig | None = None,
                 client_config: ClientConfig | None = None) -> None:
        self.core = ConsumerCore(group, config, client_config, namesrv_addr)
        self.group = self.core.group
        self._topics: set[str] = set()

    async def start(self) -> None:
        if not self.core.started:
            await self.core.open(self)

    async def shutdown(self) -> None:
        """Persist the offsets and leave the group, to the end even when the caller is
        cancelled or the persisting fails."""
        if self.core.started:
            await run_to_end(self._shutdown())

    async def _shutdown(self) -> None:
        try:
            await self.persist_offsets()
        finally:
            await self.core.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -- ClientInstance member ----------------------------------------------------------
    def subscribed_topics(self) -> list[str]:
        return sorted(self._topics)

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        """Routes are read from the instance when needed."""

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_ACTIVELY", self.core.config.message_model.value,
                            self.core.config.consume_from_where.value,
                            tuple(build_subscription(t, "*") for t in sorted(self._topics)))

    async def do_rebalance(self) -> None:
        """The application owns queue choice; there is nothing to rebalance."""

    async def persist_offsets(self) -> None:
        store = self.core.offset_store
        await store.persist_all(list(store.offsets()))

    # -- API ------------------------------------------------------------------------------
    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        check_topic(topic)
        self._topics.add(topic)
        return await self.core.subscribe_queues(topic, refresh=True)

    async def pull(self, mq: MessageQueue, sub_expression: str | MessageSelector | None, offset: int,
                   max_nums: int, *, expression_type: str = ExpressionType.TAG, timeout_ms: int = 10000) -> PullResult:
        """Pull at most ``max_nums`` messages from ``offset``; answers at once."""
        self._topics.add(mq.topic)
        sub = build_subscription(mq.topic, sub_expression, expression_type)
        return await self.core.pull_api.pull(mq, sub, offset, max_nums, timeout_ms=timeout_ms)

    async def pull_raw(self, mq: MessageQueue, sub_expression: str | MessageSelector | None, offset: int,
                       max_nums: int, *, expression_type: str = ExpressionType.TAG,
                       timeout_ms: int = 10000) -> RawPullResult:
        """:meth:`pull` with the records left as the broker stored them (PullAPI.pull_raw)."""
        self._topics.add(mq.topic)
        sub = build_subscription(mq.topic, sub_expression, expression_type)
        return await self.core.pull_api.pull_raw(mq, sub, offset, max_nums, timeout_ms=timeout_ms)

    async def pull_block_if_not_found(self, mq: MessageQueue, sub_expression: str | MessageSelector | None,
                                      offset: int, max_nums: int, *, expression_type: str = ExpressionType.TAG) -> PullResult:
        """Like :meth:`pull`, but the broker holds the request until a message arrives or
        brokerSuspendMaxTimeMillis passes (long polling)."""
        self._topics.add(mq.topic)
        sub = build_subscription(mq.topic, sub_expression, expression_type)
        cfg = self.core.config
        return await self.core.pull_api.pull(mq, sub, offset, max_nums, suspend_ms=cfg.broker_suspend_max_time_millis,
                                             timeout_ms=cfg.consumer_timeout_millis_when_suspend)

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self.core.offset_store.update_offset(mq, offset)

    async def fetch_consume_offset(self, mq: MessageQueue, *, from_store: bool = False) -> int:
        """The group's next offset on ``mq``; -1 if none is stored."""
        how = ReadOffsetType.READ_FROM_STORE if from_store else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        return await self.core.offset_store.read_offset(mq, how)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.core.min_offset(mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.core.max_offset(mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.core.search_offset(mq, timestamp_ms)
