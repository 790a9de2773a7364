"""The producer's and consumer's view of a topic's route (TopicRouteData, lakemq.remoting.bodies).

Broker id 0 is the master. A producer writes to every writable queue of every broker with a
master; a consumer reads every readable queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from lakemq.common.constants import PermName
from lakemq.common.message_queue import MessageQueue
from lakemq.remoting.bodies import BrokerData, TopicRouteData

__all__ = [
    "TopicPublishInfo",
    "brokers_of",
    "publish_queues",
    "subscribe_queues",
]


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues in RocketMQ's order: an order-topic conf wins; otherwise queue datas
    sorted by broker name, skipping brokers that are unknown or have no master."""
    if route.order_topic_conf:
        queues: list[MessageQueue] = []
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return queues
    result: list[MessageQueue] = []
    for qd in sorted(route.queue_datas):
        broker = route.broker(qd.broker_name)
        if not PermName.is_writeable(qd.perm) or broker is None or broker.master_addr is None:
            continue
        result.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return result


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues, sorted."""
    return sorted(
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if PermName.is_readable(qd.perm)
        for i in range(qd.read_queue_nums)
    )


class TopicPublishInfo:
    """A topic's writable queues plus the round-robin cursor the producer walks them with."""

    def __init__(self, topic: str, route: TopicRouteData, *, start: int | None = None) -> None:
        self.topic = topic
        self.route = route
        self.queues: tuple[MessageQueue, ...] = tuple(publish_queues(topic, route))
        self.order_topic = bool(route.order_topic_conf)
        # Random start like RocketMQ's ThreadLocalIndex, so many producers spread out.
        self._index = random.randrange(1 << 16) if start is None else start

    def ok(self) -> bool:
        return bool(self.queues)

    def _next(self) -> MessageQueue:
        self._index += 1
        return self.queues[self._index % len(self.queues)]

    def select_one(
        self,
        last_broker_name: str | None = None,
        available: Callable[[str], bool] | None = None,
    ) -> MessageQueue:
        """Round-robin, preferring a queue not on ``last_broker_name`` (the broker that just
        failed) and, when ``available`` is given, on a broker it accepts. Falls back to
        plain round-robin when every queue is excluded."""
        if not self.queues:
            raise LookupError(f"topic {self.topic} has no writable queue")
        filters: list[Callable[[MessageQueue], bool]] = []
        if available is not None:
            filters.append(lambda mq: available(mq.broker_name))
        if last_broker_name is not None:
            filters.append(lambda mq: mq.broker_name != last_broker_name)
        for _ in range(len(self.queues) if filters else 0):
            mq = self._next()
            if all(f(mq) for f in filters):
                return mq
        if available is not None and last_broker_name is not None:
            for _ in range(len(self.queues)):
                mq = self._next()
                if mq.broker_name != last_broker_name:
                    return mq
        return self._next()

    def write_queue_nums(self, broker_name: str) -> int:
        return sum(q.write_queue_nums for q in self.route.queue_datas if q.broker_name == broker_name)


def brokers_of(routes: Iterable[TopicRouteData]) -> dict[str, BrokerData]:
    """broker name -> broker data across several routes (later routes win)."""
    return {b.broker_name: b for route in routes for b in route.broker_datas}
