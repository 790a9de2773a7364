"""Rebalance for push consumers (RocketMQ's RebalanceImpl): decide which queues this
consumer owns and keep the process-queue table in step.

Clustering: every consumer of the group sorts the topic's queues and the group's consumer
ids (from a broker) and runs the same allocation strategy, so each queue has one owner.
Broadcasting: every consumer owns every queue. A queue no longer owned is dropped after its
offset is persisted; a new queue starts from the stored offset, or per consume_from_where.
Orderly consumers must hold the broker's lock on a queue (LOCK_BATCH_MQ) before pulling it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime

from lakemq.client.allocate import STRATEGIES
from lakemq.client.config import ConsumeFromWhere, MessageModel
from lakemq.client.consumer_core import ConsumerCore, retry_topic
from lakemq.client.offset_store import ReadOffsetType
from lakemq.client.process_queue import ProcessQueue
from lakemq.client.route import subscribe_queues
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, LakeMQError, RemotingError

__all__ = ["Rebalancer", "parse_consume_timestamp", "plan_changes"]

log = logging.getLogger(__name__)

StartPull = Callable[[MessageQueue, ProcessQueue, int], None]

CONSUME_LOCK_WAIT = 1.0  # seconds a dropped orderly queue waits for its running batch


def plan_changes(owned: set[MessageQueue], allocated: set[MessageQueue]) -> tuple[list[MessageQueue], list[MessageQueue]]:
    """(queues to drop, queues to add), sorted."""
    return sorted(owned - allocated), sorted(allocated - owned)


def parse_consume_timestamp(text: str, now: float | None = None) -> int:
    """yyyyMMddHHmmss in local time -> epoch ms; empty means half an hour ago (RocketMQ's default)."""
    if not text:
        return int(((now if now is not None else time.time()) - 1800) * 1000)
    try:
        return int(datetime.strptime(text, "%Y%m%d%H%M%S").timestamp() * 1000)
    except ValueError as exc:
        raise LakeMQError(f"consume_timestamp {text!r} is not yyyyMMddHHmmss") from exc


class Rebalancer:
    def __init__(self, core: ConsumerCore, *, orderly: bool, start_pull: StartPull,
                 subscribed_topics: Callable[[], list[str]]) -> None:
        self.core = core
        self.orderly = orderly
        self._start_pull = start_pull
        self._topics = subscribed_topics
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._missing: set[str] = set()  # subscribed topics the name server does not know yet
        try:
            self._strategy = STRATEGIES[core.config.allocate_strategy]
        except KeyError:
            raise LakeMQError(f"unknown allocate strategy {core.config.allocate_strategy!r}; "
                              f"known: {', '.join(STRATEGIES)}") from None

    async def do_rebalance(self) -> None:
        for topic in self._topics():
            try:
                await self._rebalance_topic(topic)
            except (RemotingError, BrokerError, LakeMQError) as exc:
                if not self.core.started:
                    return  # the consumer shut down meanwhile: nothing left to balance
                log.warning("rebalance of %s for %s failed: %s", topic, self.core.group, exc)

    async def _rebalance_topic(self, topic: str) -> None:
        instance = self.core.instance
        route = instance.routes.get(topic) or await instance.update_route(topic)
        if route is None:
            self._await_topic(topic)
            return
        if topic in self._missing:
            self._missing.discard(topic)
            log.info("topic %s exists now; group %s consumes it", topic, self.core.group)
        mq_all = sorted(subscribe_queues(topic, route))
        if self.core.config.message_model is MessageModel.BROADCASTING:
            allocated = set(mq_all)
        else:
            cid_all = sorted(await instance.api.get_consumer_id_list(await instance.any_broker_addr(topic),
                                                                     self.core.group))
            if not cid_all:
                log.warning("no consumer of %s is known to the broker yet", self.core.group)
                return
            allocated = set(self._strategy(instance.client_id, mq_all, cid_all))
        owned = {mq for mq in self.process_queues if mq.topic == topic}
        to_drop, to_add = plan_changes(owned, allocated)
        for mq in to_drop:
            await self.drop(mq)
        for mq in owned & allocated:
            pq = self.process_queues[mq]
            if pq.is_pull_expired():
                log.warning("%s has not pulled for 120 s; recreating it", mq)
                await self.drop(mq)
                to_add.append(mq)
        for mq in to_add:
            await self._add(mq)
        if to_drop or to_add:
            log.info("group %s topic %s: dropped %s, added %s", self.core.group, topic,
                     [str(m) for m in to_drop], [str(m) for m in to_add])

    def _await_topic(self, topic: str) -> None:
        """A subscribed topic without a route: nothing to own until it appears. Said once (a
        group's own retry topic only appears after the broker has seen the group: not news)."""
        if topic not in self._missing:
            self._missing.add(topic)
            if topic != retry_topic(self.core.group):
                log.info("topic %s does not exist (yet); group %s consumes it once it does", topic, self.core.group)

    async def _add(self, mq: MessageQueue) -> None:
        if self.orderly and self.core.config.message_model is MessageModel.CLUSTERING and not await self.lock(mq):
            log.info("%s is locked by another consumer; trying again at the next rebalance", mq)
            return
        store = self.core.offset_store
        store.remove_offset(mq)
        try:
            offset = await self.compute_pull_from_where(mq)
        except (RemotingError, BrokerError) as exc:
            log.warning("cannot find where to start %s: %s", mq, exc)
            return
        pq = self.process_queues.get(mq) or ProcessQueue()
        if self.orderly and self.core.config.message_model is MessageModel.CLUSTERING:
            pq.locked = True
            pq.last_lock_timestamp = time.monotonic() * 1000
        self.process_queues[mq] = pq
        self._start_pull(mq, pq, offset)

    async def drop(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        holds_consume_lock = False
        if self.orderly and self.core.config.message_model is MessageModel.CLUSTERING:
            # Wait for a batch still in the listener, so the offset it commits is persisted below.
            try:
                await asyncio.wait_for(pq.consume_lock.acquire(), CONSUME_LOCK_WAIT)
                holds_consume_lock = True
            except TimeoutError:
                # Keep the broker lock (it expires on its own) so no other consumer starts
                # this queue while we are mid-batch.
                log.warning("%s is still being consumed; leaving its broker lock to expire", mq)
        try:
            store = self.core.offset_store
            try:
                await store.persist(mq)
            except (RemotingError, BrokerError) as exc:
                log.warning("persisting the offset of dropped %s failed: %s", mq, exc)
            store.remove_offset(mq)
            if holds_consume_lock:
                await self.unlock([mq])
        finally:
            if holds_consume_lock:
                pq.consume_lock.release()

    async def drop_all(self) -> None:
        for mq in sorted(self.process_queues):
            await self.drop(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        last = await self.core.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        is_retry = mq.topic.startswith("%RETRY%")
        where = self.core.config.consume_from_where
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
            return 0 if is_retry else await self.core.max_offset(mq)
        if is_retry:
            return await self.core.max_offset(mq)
        return await self.core.search_offset(mq, parse_consume_timestamp(self.core.config.consume_timestamp))

    # -- broker locks (orderly, clustering) --------------------------------------------
    async def lock(self, mq: MessageQueue) -> bool:
        instance = self.core.instance
        try:
            addr = await instance.broker_addr(mq.broker_name, mq.topic)
            locked = await instance.api.lock_batch_mq(addr, self.core.group, instance.client_id, [mq])
        except (RemotingError, BrokerError, LakeMQError) as exc:
            log.warning("lock of %s failed: %s", mq, exc)
            return False
        pq = self.process_queues.get(mq)
        if pq is not None and mq in locked:
            pq.locked = True
            pq.last_lock_timestamp = time.monotonic() * 1000
        return mq in locked

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue, one LOCK_BATCH_MQ per broker."""
        instance = self.core.instance
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.process_queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, mqs in sorted(by_broker.items()):
            try:
                addr = await instance.broker_addr(broker_name, mqs[0].topic)
                locked = await instance.api.lock_batch_mq(addr, self.core.group, instance.client_id, mqs)
            except (RemotingError, BrokerError, LakeMQError) as exc:
                log.warning("lock renewal on %s failed: %s", broker_name, exc)
                continue
            now = time.monotonic() * 1000
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is None:
                    continue
                pq.locked = mq in locked
                if pq.locked:
                    pq.last_lock_timestamp = now

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        instance = self.core.instance
        for mq in mqs:
            try:
                addr = await instance.broker_addr(mq.broker_name, mq.topic)
                await instance.api.unlock_batch_mq(addr, self.core.group, instance.client_id, [mq])
            except (RemotingError, BrokerError, LakeMQError) as exc:
                log.warning("unlock of %s failed: %s", mq, exc)

    def owned(self) -> list[MessageQueue]:
        return sorted(self.process_queues)
