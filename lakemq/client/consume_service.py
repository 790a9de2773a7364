"""Running the user's listener over pulled messages: concurrently, or one batch at a time
per queue in order.

A listener is a plain function (run in a worker thread, at most consume_thread_max at once)
or an ``async def`` (awaited on the loop). It returns a status; an exception or None counts
as RECONSUME_LATER (orderly: SUSPEND_CURRENT_QUEUE_A_MOMENT). The offset committed for a
queue is always the smallest offset still in flight (see ProcessQueue).

Concurrently, a plain listener's messages cross threads once per pulled batch, not once per
message: the batch is one job for the consume threads, which call the listener on each chunk
of consume_message_batch_max_size in turn, then forget what succeeded and move the queue's
committed offset themselves (as RocketMQ's ConsumeRequest does). Only what failed goes back
to the event loop, to be sent back to the broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _prepare(group_retry: str, msgs: list[MessageExt]) -> None:
    """Give the listener the original topic of retried messages and a consume start time."""
    now = str(int(time.time() * 1000))
    for m in msgs:
        properties = m.properties
        if m.topic == group_retry:
            real = properties.get(MessageConst.RETRY_TOPIC)
            if real:
                m.topic = real
        properties[MessageConst.CONSUME_START_TIMESTAMP] = now


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
        """Made on the event loop (PushConsumer.start)."""
        super().__init__(core)
        self.listener = listener
        self.send_back = send_back
        self._loop = asyncio.get_running_loop()
        self._group_retry = retry_topic(core.group)
        # A coroutine listener runs on the loop; a plain one in these threads (RocketMQ's
        # consumeExecutor, consumeThreadMax of them).
        self._executor = None if inspect.iscoroutinefunction(listener) else concurrent.futures.ThreadPoolExecutor(
            max(1, core.config.consume_thread_max), thread_name_prefix=f"ConsumeMessageThread_{core.group}")
        self._jobs: set[concurrent.futures.Future[None]] = set()

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float = 0.0) -> None:
        if delay:
            self._spawn(self._later(msgs, pq, mq, delay))
        elif self._executor is not None:
            job = self._executor.submit(self._consume_in_thread, msgs, pq, mq)
            self._jobs.add(job)
            job.add_done_callback(self._jobs.discard)
        else:
            size = max(1, self.core.config.consume_message_batch_max_size)
            for i in range(0, len(msgs), size):
                self._spawn(self._consume(msgs[i : i + size], pq, mq))

    async def _later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float) -> None:
        await asyncio.sleep(delay)
        if not pq.dropped:
            self.submit(msgs, pq, mq)

    async def shutdown(self, timeout: float) -> None:
        await super().shutdown(timeout)
        if self._executor is not None:
            if self._jobs:  # listeners still running: let them finish, up to the timeout
                await asyncio.wait([asyncio.wrap_future(job) for job in list(self._jobs)], timeout=timeout)
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _failed(self, chunk: list[MessageExt], ctx: ConsumeConcurrentlyContext, status: object) -> list[MessageExt]:
        """The messages of ``chunk`` the listener did not consume (RocketMQ's ackIndex)."""
        if status is not ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            return chunk
        if ctx.ack_index < 0 or ctx.ack_index >= len(chunk) - 1:
            return []
        return chunk[ctx.ack_index + 1 :]

    def _consume_in_thread(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """A consume thread's job: one pulled batch, chunk after chunk."""
        if pq.dropped:
            return
        size = max(1, self.core.config.consume_message_batch_max_size)
        listener, broadcasting = self.listener, self.core.config.message_model is MessageModel.BROADCASTING
        failed: list[tuple[MessageExt, int]] = []
        _prepare(self._group_retry, msgs)
        for i in range(0, len(msgs), size):
            chunk = msgs if size >= len(msgs) else msgs[i : i + size]
            ctx = ConsumeConcurrentlyContext(mq)
            try:
                status = listener(chunk, ctx)
                # A status is the common answer: checked first, it spares inspect's checks.
                if status.__class__ is not ConsumeConcurrentlyStatus and inspect.isawaitable(status):
                    # a plain function that returned a coroutine
                    status = asyncio.run_coroutine_threadsafe(_awaited(status), self._loop).result()
            except Exception:  # the user's code: any failure means "later"
                log.exception("message listener raised on %d message(s) of %s", len(chunk), mq)
                status = ConsumeConcurrentlyStatus.RECONSUME_LATER
            if pq.dropped:
                return  # the queue moved to another consumer, which will deliver these again
            if status is _SUCCESS and ctx.ack_index < 0:
                continue  # every message of the chunk consumed (_failed's first answer, without its call)
            for m in self._failed(chunk, ctx, status):
                if broadcasting:
                    log.warning("broadcast message %s failed and is dropped", m.msg_id)
                else:
                    failed.append((m, ctx.delay_level_when_next_consume))
        done = msgs
        if failed:
            unfinished = {id(m) for m, _ in failed}
            done = [m for m in msgs if id(m) not in unfinished]
            self._loop.call_soon_threadsafe(self._spawn, self._send_back_failed(failed, pq, mq))
        self._commit(done, pq, mq)

    def _commit(self, done: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.core.offset_store.update_offset(mq, offset, increase_only=True)

    async def _send_back_failed(self, failed: list[tuple[MessageExt, int]], pq: ProcessQueue,
                                mq: MessageQueue) -> None:
        """On the loop: what the broker takes back is done; the rest is retried here later."""
        sent: list[MessageExt] = []
        retry_locally: list[MessageExt] = []
        for m, delay_level in failed:
            if await self.send_back(m, mq, delay_level):
                sent.append(m)
            else:
                m.reconsume_times += 1
                retry_locally.append(m)
        if sent:
            self._commit(sent, pq, mq)
        if retry_locally:
            self.submit(retry_locally, pq, mq, LOCAL_RETRY_DELAY)

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """A coroutine listener's chunk, on the loop."""
        if pq.dropped:
            return
        _prepare(self._group_retry, msgs)
        ctx = ConsumeConcurrentlyContext(mq)
        status = await _call(self.listener, msgs, ctx, self.slots, ConsumeConcurrentlyStatus.RECONSUME_LATER)
        if pq.dropped:
            return  # the queue moved to another consumer, which will deliver these again
        failed = self._failed(msgs, ctx, status)
        if failed and self.core.config.message_model is MessageModel.BROADCASTING:
            for m in failed:
                log.warning("broadcast message %s failed and is dropped", m.msg_id)
            failed = []
        if failed:
            unfinished = {id(m) for m in failed}
            self._commit([m for m in msgs if id(m) not in unfinished], pq, mq)
            await self._send_back_failed([(m, ctx.delay_level_when_next_consume) for m in failed], pq, mq)
        else:
            self._commit(msgs, pq, mq)


async def _awaited(awaitable: Awaitable[S]) -> S:
    return await awaitable


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
        _prepare(retry_topic(self.core.group), msgs)
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
