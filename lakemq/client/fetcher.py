"""The push consumer's fetcher: one long-polling pull loop per owned queue.

Each loop pulls from its next offset (the broker holds an empty pull up to
brokerSuspendMaxTimeMillis), caches what arrives in the queue's ProcessQueue and hands it to
the consume service. It pauses while the cache is over pullThresholdForQueue messages,
pullThresholdSizeForQueue MiB or (concurrent consumption) consumeConcurrentlyMaxSpan offsets,
backs off after errors, and piggybacks the committed offset on every pull (clustering).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from lakemq.client.config import MessageModel
from lakemq.client.consumer_core import ConsumerCore
from lakemq.client.offset_store import ReadOffsetType
from lakemq.client.process_queue import ProcessQueue
from lakemq.client.results import PullStatus
from lakemq.common.message import MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import BrokerError, LakeMQError, RemotingError

__all__ = ["Fetcher"]

log = logging.getLogger(__name__)

Submit = Callable[[list[MessageExt], ProcessQueue, MessageQueue], None]


class Fetcher:
    def __init__(self, core: ConsumerCore, subscriptions: Mapping[str, SubscriptionData], submit: Submit,
                 on_offset_illegal: Callable[[MessageQueue], Awaitable[None]], *, orderly: bool) -> None:
        self.core = core
        self.subscriptions = subscriptions
        self.submit = submit
        self.on_offset_illegal = on_offset_illegal
        self.orderly = orderly
        self.stopping = False
        self._loops: dict[MessageQueue, asyncio.Task[None]] = {}

    def start(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """(Re)start pulling ``mq`` from ``offset``; ignored once stopping."""
        if self.stopping:
            pq.dropped = True
            return
        old = self._loops.pop(mq, None)
        if old is not None:
            old.cancel()
        self._loops[mq] = asyncio.create_task(self._loop(mq, pq, offset), name=f"pull-{mq}")

    async def stop(self) -> None:
        self.stopping = True
        loops = list(self._loops.values())
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        self._loops.clear()

    async def _loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        try:
            while not pq.dropped:
                offset = await self._pull_once(mq, pq, offset)
        finally:
            if self._loops.get(mq) is asyncio.current_task():
                del self._loops[mq]

    async def _pull_once(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> int:
        cfg = self.core.config
        store = self.core.offset_store
        if pq.flow_control(max_count=cfg.pull_threshold_for_queue, max_size_mib=cfg.pull_threshold_size_for_queue,
                           max_span=None if self.orderly else cfg.consume_concurrently_max_span):
            pq.last_pull_timestamp = time.monotonic() * 1000  # paused on purpose, not stuck
            await asyncio.sleep(cfg.pull_time_delay_millis_when_flow_control / 1000)
            return offset
        clustering = cfg.message_model is MessageModel.CLUSTERING
        commit = await store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) if clustering else 0
        try:
            result = await self.core.pull_api.pull(
                mq, self.subscriptions[mq.topic], offset, cfg.pull_batch_size, commit_offset=max(commit, 0),
                suspend_ms=cfg.broker_suspend_max_time_millis, timeout_ms=cfg.consumer_timeout_millis_when_suspend)
        except (RemotingError, BrokerError, LakeMQError) as exc:
            log.warning("pull of %s at %d failed: %s", mq, offset, exc)
            await asyncio.sleep(cfg.pull_time_delay_millis_when_exception / 1000)
            return offset
        pq.last_pull_timestamp = time.monotonic() * 1000
        if pq.dropped:
            return offset
        if result.pull_status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s is illegal, moving to %d", offset, mq, result.next_begin_offset)
            store.update_offset(mq, result.next_begin_offset)
            await store.persist(mq)
            await self.on_offset_illegal(mq)  # rebalance re-creates the queue from the fixed offset
            return result.next_begin_offset
        if result.msgs:
            pq.put_messages(result.msgs)
            self.submit(result.msgs, pq, mq)
        elif pq.msg_count == 0:
            # Nothing in flight and nothing matched: the committed offset may move on.
            store.update_offset(mq, result.next_begin_offset, increase_only=True)
        if cfg.pull_interval:
            await asyncio.sleep(cfg.pull_interval / 1000)
        return result.next_begin_offset
