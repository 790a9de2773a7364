"""JSON bodies of the name server, registration, heartbeat and lock requests (RocketMQ's
RemotingSerializable classes), with Java's field names on the wire.

Route data and fastjson's integer map keys. Java's fastjson writes ``BrokerData.brokerAddrs``
(a ``HashMap<Long, String>``) with bare keys, ``{"0":...}`` being written as ``{0:"ip:port"}``,
which is not JSON. What the peers accept, from their sources:

- Java clients parse route bodies with fastjson, which reads both bare and quoted numeric keys
  into the Long-keyed map; since 4.9.4 the Java name server itself answers in standard JSON
  (quoted keys, SerializerFeature.BrowserCompatible) when the request's version is >= V4_9_4
  or ``acceptStandardJsonOnly`` is set, so quoted keys are what current Java clients receive.
- rocketmq-client-cpp 2.0.x (inside the ``rocketmq`` 0.4.4 Python package) parses
  TopicRouteData with jsoncpp's CharReaderBuilder and ``allowNumericKeys = true``, so it takes
  both forms; it reads each key with ``atoi``, ``orderTopicConf`` with ``asString`` (null reads
  as ""), and ignores ``topicSysFlag`` and ``filterServerTable``.

So :meth:`TopicRouteData.encode` writes standard JSON with quoted keys: every client accepts
it, and any JSON tool can read it. Key order follows fastjson's (sorted field names).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from lakemq.common.constants import MASTER_ID
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import FrameError, RemotingCommandError
from lakemq.remoting import fastjson

__all__ = [
    "BrokerData",
    "ClusterInfo",
    "ConsumerData",
    "DataVersion",
    "GetConsumerListByGroupResponseBody",
    "HeartbeatData",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "QueueData",
    "RegisterBrokerBody",
    "TopicList",
    "TopicRouteData",
    "decode_json",
    "encode_json",
]


T = TypeVar("T")


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode("utf-8")


def decode_json(body: bytes | None, what: str) -> Any:
    """Strict JSON or fastjson's bare-key dialect, which Java peers write (lakemq.remoting.fastjson)."""
    if not body:
        raise RemotingCommandError(f"{what}: the body is empty")
    try:
        return fastjson.loads(bytes(body))
    except FrameError as exc:
        raise RemotingCommandError(f"{what}: body is not JSON: {exc}") from exc


def _parse(body: bytes | None, what: str, build: Callable[[dict[str, Any]], T]) -> T:
    """Decode a JSON object body and build from it; missing or mistyped fields become
    RemotingCommandError."""
    data = decode_json(body, what)
    if not isinstance(data, dict):
        raise RemotingCommandError(f"{what}: body is not a JSON object")
    try:
        return build(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RemotingCommandError(f"bad {what} body: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's DataVersion: a broker bumps it whenever its topics or groups change, and the
    NameServer and slaves compare it to skip what has not changed."""

    timestamp: int
    counter: int = 0
    state_version: int = 0

    @classmethod
    def now(cls) -> DataVersion:
        return cls(time.time_ns() // 1_000_000)

    def next(self) -> DataVersion:
        """The version after a change (the caller serializes changes under its own lock)."""
        return replace(self, timestamp=time.time_ns() // 1_000_000, counter=self.counter + 1)

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: object) -> DataVersion:
        if not isinstance(data, dict):
            raise RemotingCommandError(f"a data version is a JSON object, not {type(data).__name__}")
        return cls(int(data.get("timestamp", 0)), int(data.get("counter", 0)),
                   int(data.get("stateVersion", 0)))


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER's body: topicConfigSerializeWrapper {topicConfigTable, dataVersion} and
    filterServerList. Topic configs stay as their JSON objects (TopicConfig's fields:
    topicName, readQueueNums, writeQueueNums, perm, topicFilterType, topicSysFlag, order)."""

    topic_config_table: dict[str, dict[str, Any]]
    data_version: DataVersion
    filter_server_list: tuple[str, ...] = ()

    def encode(self) -> bytes:
        return encode_json({
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": {
                "dataVersion": self.data_version.to_json(),
                "topicConfigTable": self.topic_config_table,
            },
        })

    @classmethod
    def decode(cls, body: bytes | None) -> RegisterBrokerBody:
        def build(data: dict[str, Any]) -> RegisterBrokerBody:
            wrapper = data.get("topicConfigSerializeWrapper") or {}
            table = wrapper.get("topicConfigTable") or {}
            if not all(isinstance(v, dict) for v in table.values()):
                raise ValueError("topicConfigTable values must be objects")
            return cls({str(k): v for k, v in table.items()},
                       DataVersion.from_json(wrapper.get("dataVersion") or {}),
                       tuple(str(s) for s in data.get("filterServerList") or ()))

        return _parse(body, "register broker", build)


@dataclass(frozen=True, slots=True)
class KVTable:
    table: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return encode_json({"table": self.table})

    @classmethod
    def decode(cls, body: bytes | None) -> KVTable:
        def build(data: dict[str, Any]) -> KVTable:
            return cls({str(k): str(v) for k, v in (data.get("table") or {}).items()})

        return _parse(body, "kv table", build)


@dataclass(frozen=True, slots=True, order=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueData:
        # RocketMQ before 4.9 spells the field topicSynFlag.
        return cls(str(data["brokerName"]), int(data["readQueueNums"]), int(data["writeQueueNums"]),
                   int(data["perm"]), int(data.get("topicSysFlag", data.get("topicSynFlag", 0))))


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)  # broker id -> "ip:port"

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master, or any slave when the master is gone (reads only)."""
        if MASTER_ID in self.broker_addrs:
            return self.broker_addrs[MASTER_ID]
        return next(iter(self.broker_addrs.values()), None)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerData:
        return cls(str(data.get("cluster", "")), str(data["brokerName"]),
                   {int(k): str(v) for k, v in (data.get("brokerAddrs") or {}).items()})


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def encode(self) -> bytes:
        """Standard JSON with quoted broker-id keys; see the module docstring for why."""
        data: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
            "queueDatas": [q.to_json() for q in self.queue_datas],
        }
        if self.order_topic_conf is not None:  # fastjson leaves nulls out
            data["orderTopicConf"] = self.order_topic_conf
        return encode_json(data)

    @classmethod
    def decode(cls, body: bytes | None) -> TopicRouteData:
        def build(data: dict[str, Any]) -> TopicRouteData:
            return cls(tuple(QueueData.from_json(q) for q in data.get("queueDatas") or ()),
                       tuple(BrokerData.from_json(b) for b in data.get("brokerDatas") or ()),
                       data.get("orderTopicConf"),
                       {str(k): [str(a) for a in v] for k, v in (data.get("filterServerTable") or {}).items()})

        return _parse(body, "topic route", build)

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.broker_datas if b.broker_name == broker_name), None)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, frozenset[str]]

    def encode(self) -> bytes:
        return encode_json({
            "brokerAddrTable": {name: b.to_json() for name, b in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        })

    @classmethod
    def decode(cls, body: bytes | None) -> ClusterInfo:
        def build(data: dict[str, Any]) -> ClusterInfo:
            return cls({str(k): BrokerData.from_json(v) for k, v in (data.get("brokerAddrTable") or {}).items()},
                       {str(k): frozenset(map(str, v)) for k, v in (data.get("clusterAddrTable") or {}).items()})

        return _parse(body, "cluster info", build)


@dataclass(frozen=True, slots=True)
class TopicList:
    topic_list: tuple[str, ...]
    broker_addr: str | None = None

    def encode(self) -> bytes:
        data: dict[str, Any] = {"topicList": sorted(self.topic_list)}
        if self.broker_addr is not None:
            data["brokerAddr"] = self.broker_addr
        return encode_json(data)

    @classmethod
    def decode(cls, body: bytes | None) -> TopicList:
        def build(data: dict[str, Any]) -> TopicList:
            return cls(tuple(str(t) for t in data.get("topicList") or ()), data.get("brokerAddr"))

        return _parse(body, "topic list", build)


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "groupName": self.group_name, "messageModel": self.message_model,
                "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
                "unitMode": self.unit_mode}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConsumerData:
        return cls(str(data["groupName"]), str(data.get("consumeType") or "CONSUME_PASSIVELY"),
                   str(data.get("messageModel") or "CLUSTERING"),
                   str(data.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
                   tuple(SubscriptionData.from_json(s) for s in data.get("subscriptionDataSet") or ()),
                   bool(data.get("unitMode", False)))


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """HEART_BEAT's body: clientID, producerDataSet [{groupName}], consumerDataSet."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()

    def encode(self) -> bytes:
        return encode_json({"clientID": self.client_id,
                            "consumerDataSet": [c.to_json() for c in self.consumer_data_set],
                            "producerDataSet": [{"groupName": g} for g in self.producer_groups]})

    @classmethod
    def decode(cls, body: bytes | None) -> HeartbeatData:
        def build(data: dict[str, Any]) -> HeartbeatData:
            return cls(str(data["clientID"]),
                       tuple(str(p["groupName"]) for p in data.get("producerDataSet") or ()),
                       tuple(ConsumerData.from_json(c) for c in data.get("consumerDataSet") or ()))

        return _parse(body, "heartbeat", build)


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody:
    """LOCK_BATCH_MQ's and UNLOCK_BATCH_MQ's body."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...]
    only_this_broker: bool = False

    def encode(self) -> bytes:
        return encode_json({"clientId": self.client_id, "consumerGroup": self.consumer_group,
                            "mqSet": [m.to_json() for m in self.mq_set],
                            "onlyThisBroker": self.only_this_broker})

    @classmethod
    def decode(cls, body: bytes | None) -> LockBatchRequestBody:
        def build(data: dict[str, Any]) -> LockBatchRequestBody:
            return cls(str(data["consumerGroup"]), str(data["clientId"]),
                       tuple(MessageQueue.from_json(m) for m in data.get("mqSet") or ()),
                       bool(data.get("onlyThisBroker", False)))

        return _parse(body, "lock batch", build)


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody:
    lock_ok_mq_set: tuple[MessageQueue, ...]

    def encode(self) -> bytes:
        return encode_json({"lockOKMQSet": [m.to_json() for m in self.lock_ok_mq_set]})

    @classmethod
    def decode(cls, body: bytes | None) -> LockBatchResponseBody:
        def build(data: dict[str, Any]) -> LockBatchResponseBody:
            return cls(tuple(MessageQueue.from_json(m) for m in data.get("lockOKMQSet") or ()))

        return _parse(body, "lock batch response", build)


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupResponseBody:
    consumer_id_list: tuple[str, ...]

    def encode(self) -> bytes:
        return encode_json({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def decode(cls, body: bytes | None) -> GetConsumerListByGroupResponseBody:
        def build(data: dict[str, Any]) -> GetConsumerListByGroupResponseBody:
            return cls(tuple(str(c) for c in data.get("consumerIdList") or ()))

        return _parse(body, "consumer list", build)
