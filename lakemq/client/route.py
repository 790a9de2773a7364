"""Topic routes from the name server, and the producer's view of them.

GET_ROUTEINFO_BY_TOPIC answers with TopicRouteData JSON (fastjson dialect, see
:mod:`lakemq.common.fastjson`)::

    {"orderTopicConf": "b1:4;b2:4" | null,
     "queueDatas":  [{"brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag"}],
     "brokerDatas": [{"cluster", "brokerName", "brokerAddrs": {0: "ip:port", 1: ...}}],
     "filterServerTable": {}}

Broker id 0 is the master. A producer writes to every writable queue of every broker with a
master; a consumer reads every readable queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from lakemq.client.message_queue import MessageQueue
from lakemq.common import fastjson
from lakemq.errors import FrameError

__all__ = [
    "MASTER_ID",
    "BrokerData",
    "PermName",
    "QueueData",
    "TopicPublishInfo",
    "TopicRouteData",
    "brokers_of",
    "publish_queues",
    "subscribe_queues",
]

MASTER_ID: Final = 0


class PermName:
    PERM_PRIORITY: Final = 0x8
    PERM_READ: Final = 0x4
    PERM_WRITE: Final = 0x2
    PERM_INHERIT: Final = 0x1

    @staticmethod
    def is_readable(perm: int) -> bool:
        return perm & PermName.PERM_READ == PermName.PERM_READ

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return perm & PermName.PERM_WRITE == PermName.PERM_WRITE


@dataclass(frozen=True, slots=True, order=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master, or any slave when the master is gone (reads only)."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(self.broker_addrs.values()), None)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, data: bytes | str) -> TopicRouteData:
        obj = fastjson.loads(data)
        try:
            queues = tuple(
                QueueData(str(q["brokerName"]), int(q["readQueueNums"]), int(q["writeQueueNums"]),
                          int(q["perm"]), int(q.get("topicSysFlag", q.get("topicSynFlag", 0))))
                for q in obj.get("queueDatas") or ()
            )
            brokers = tuple(
                BrokerData(str(b.get("cluster", "")), str(b["brokerName"]),
                           {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()})
                for b in obj.get("brokerDatas") or ()
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FrameError(f"bad topic route: {exc!r}") from exc
        return cls(queues, brokers, obj.get("orderTopicConf") or None)

    def to_json(self) -> dict[str, Any]:
        return {
            "orderTopicConf": self.order_topic_conf,
            "queueDatas": [
                {"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                 "writeQueueNums": q.write_queue_nums, "perm": q.perm, "topicSysFlag": q.topic_sys_flag}
                for q in self.queue_datas
            ],
            "brokerDatas": [
                {"cluster": b.cluster, "brokerName": b.broker_name,
                 "brokerAddrs": {str(k): v for k, v in b.broker_addrs.items()}}
                for b in self.broker_datas
            ],
            "filterServerTable": {},
        }

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == broker_name), None)


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
