"""Running the user's listener over pulled messages: concurrently, or one batch at a time
per queue in order.

A listener is a plain function (run in a worker thread, at most consume_thread_max at once)
or an ``async def`` (awaited on the loop). It returns a status; an exception or None counts
as RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT). The offset committed for a
queue is always the smallest offset still in flight (see ProcessQueue).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lakemq.client.config import MessageModel
from lakemq.client.consumer_core import ConsumerCore, retry_topic
from lakemq.client.process_queue import ProcessQueue
from lakemq.client.rebalance import Rebalancer
from lakemq.client.results import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from lakemq.common.message import MessageConst, MessageExt
from lakemq.common.message_queue import MessageQueue

__all__ = ["ConcurrentConsumeService", "ConcurrentListener", "OrderlyConsumeService", "OrderlyListener"]

log = logging.getLogger(__name__)

S = TypeVar("S")
ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext],
                              ConsumeConcurrentlyStatus | Awaitable[ConsumeConcurrentlyStatus]]
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext],
                           ConsumeOrderlyStatus | Awaitable[ConsumeOrderlyStatus]]
SendBack = Callable[[MessageExt, MessageQueue, int], Awaitable[bool]]

LOCAL_RETRY_DELAY = 5.0  # RocketMQ's submitConsumeRequestLater


def _prepare(group: str, msgs: list[MessageExt]) -> None:
    """Give the listener the original topic of retried messages and a consume start time."""
    group_retry = retry_topic(group)
    now = str(int(time.time() * 1000))
    for m in msgs:
        real = m.properties.get(MessageConst.RETRY_TOPIC)
        if real and m.topic == group_retry:
            m.topic = real
        m.properties[MessageConst.CONSUME_START_TIMESTAMP] = now


async def _call(listener: Callable[..., Any], msgs: list[MessageExt], ctx: Any, slots: asyncio.Semaphore,
                failed: S) -> S:
    async with slots:
        try:
            if inspect.iscoroutinefunction(listener):
                status = await listener(msgs, ctx)
            else:
                status = await asyncio.to_thread(listener, msgs, ctx)
                if inspect.isawaitable(status):
                    status = await status
        except Exception:  # the user's code: any failure means "later"
            log.exception("message listener raised on %d message(s) of %s", len(msgs), ctx.message_queue)
            return failed
    return failed if status is None else status


class _Service:
    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.slots = asyncio.Semaphore(core.config.consume_thread_max)
        self.tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def shutdown(self, timeout: float) -> None:
        """Let running listeners finish (up to ``timeout``), then cancel what is left."""
        if self.tasks:
            _, pending = await asyncio.wait(list(self.tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


class ConcurrentConsumeService(_Service):
    def __init__(self, core: ConsumerCore, listener: ConcurrentListener, send_back: SendBack) -> None:
        super().__init__(core)
        self.listener = listener
        self.send_back = send_back

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float = 0.0) -> None:
        size = max(1, self.core.config.consume_message_batch_max_size)
        for i in range(0, len(msgs), size):
            self._spawn(self._consume(msgs[i : i + size], pq, mq, delay))

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if pq.dropped:
            return
        _prepare(self.core.group, msgs)
        ctx = ConsumeConcurrentlyContext(mq)
        status = await _call(self.listener, msgs, ctx, self.slots, ConsumeConcurrentlyStatus.RECONSUME_LATER)
        if pq.dropped:
            return  # the queue moved to another consumer, which will deliver these again
        ack_index = len(msgs) - 1 if ctx.ack_index < 0 else min(ctx.ack_index, len(msgs) - 1)
        if status is not ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = -1
        retry_locally: list[MessageExt] = []
        for m in msgs[ack_index + 1 :]:
            if self.core.config.message_model is MessageModel.BROADCASTING:
                log.warning("broadcast message %s failed and is dropped", m.msg_id)
            elif not await self.send_back(m, mq, ctx.delay_level_when_next_consume):
                m.reconsume_times += 1
                retry_locally.append(m)
        retry_ids = {id(m) for m in retry_locally}
        done = [m for m in msgs if id(m) not in retry_ids]
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.core.offset_store.update_offset(mq, offset, increase_only=True)
        if retry_locally:
            self.submit(retry_locally, pq, mq, LOCAL_RETRY_DELAY)


class OrderlyConsumeService(_Service):
    """One worker per queue drains its ProcessQueue batch by batch; a suspended batch is
    retried in place after suspend_current_queue_time_millis, so order holds."""

    def __init__(self, core: ConsumerCore, listener: OrderlyListener, rebalancer: Rebalancer,
                 send_back: SendBack) -> None:
        super().__init__(core)
        self.listener = listener
        self.rebalancer = rebalancer
        self.send_back = send_back
        self._workers: dict[MessageQueue, asyncio.Task[None]] = {}

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        worker = self._workers.get(mq)
        if worker is None or worker.done():
            self._workers[mq] = self._spawn(self._drain(pq, mq))

    async def _drain(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        clustering = self.core.config.message_model is MessageModel.CLUSTERING
        batch = max(1, self.core.config.consume_message_batch_max_size)
        while not pq.dropped:
            if clustering and (not pq.locked or pq.is_lock_expired()) and not await self.rebalancer.lock(mq):
                await asyncio.sleep(3.0)
                continue
            msgs = pq.take_messages(batch)
            if not msgs:
                return
            async with pq.consume_lock:
                suspend_ms = await self._consume_batch(msgs, pq, mq)
            if suspend_ms is not None:
                await asyncio.sleep(suspend_ms / 1000)

    async def _consume_batch(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> int | None:
        """Run the listener on one batch; returns how long to suspend the queue, or None."""
        _prepare(self.core.group, msgs)
        ctx = ConsumeOrderlyContext(mq)
        status = await _call(self.listener, msgs, ctx, self.slots, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)
        suspend = status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if pq.dropped and suspend:
            return None  # not committed: the queue's next owner consumes this batch again
        if suspend and not await self._give_up(msgs, mq):
            for m in msgs:
                m.reconsume_times += 1
            pq.make_message_to_consume_again(msgs)
            wait = ctx.suspend_current_queue_time_millis
            return wait if wait >= 0 else self.core.config.suspend_current_queue_time_millis
        # Committed even when the queue was dropped meanwhile: the rebalancer persists the
        # offset only after this batch releases the consume lock, and only then unlocks the
        # queue at the broker, so the next owner starts after this batch.
        offset = pq.commit()
        if offset >= 0:
            self.core.offset_store.update_offset(mq, offset)
        return None

    async def _give_up(self, msgs: list[MessageExt], mq: MessageQueue) -> bool:
        """After max_reconsume_times the batch goes to the dead-letter queue (via send-back
        with level -1); True when the broker took every message of it."""
        limit = self.core.config.max_reconsume_times
        if not all(m.reconsume_times >= limit for m in msgs):
            return False
        results = [await self.send_back(m, mq, -1) for m in msgs]
        return all(results)
