"""RouteInfoManager: who serves which topic, as RocketMQ's name server keeps it.

Tables::

    topic_queue_table    topic -> {broker name -> QueueData}
    broker_addr_table    broker name -> BrokerData (cluster, {broker id -> addr}; id 0 = master)
    cluster_addr_table   cluster -> {broker name}
    broker_live_table    (cluster, addr) -> BrokerLiveInfo (last update, data version, connection)
    filter_server_table  (cluster, addr) -> [filter server addr]

Brokers register every 30 s; one silent longer than its timeout, or whose connection closes,
is removed with its queues. A master's topic configs make queue data; a slave's only fill in
topics its group has no queue data for, and only while the group has no master (the master died
before it registered a topic the slave holds): the slave serves them. Every method runs on the
name server's event loop, so the tables need no lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from lakemq.common.constants import MASTER_ID
from lakemq.remoting.bodies import BrokerData, ClusterInfo, DataVersion, QueueData, TopicRouteData

__all__ = ["BrokerLiveInfo", "RegisterBrokerResult", "RouteInfoManager"]

log = logging.getLogger(__name__)


BrokerKey = tuple[str, str]  # (cluster name, broker addr)


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_millis: int
    timeout_millis: int
    data_version: DataVersion
    ha_server_addr: str
    connection: Any = None  # the RemotingConnection the broker registered over, if any
    topic_configs: dict[str, dict[str, Any]] | None = None  # a slave's, for when its master is gone


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class RouteInfoManager:
    default_timeout_millis: int = 120_000
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[BrokerKey, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[BrokerKey, list[str]] = field(default_factory=dict)

    def register_broker(self, *, cluster_name: str, broker_addr: str, broker_name: str,
                        broker_id: int, ha_server_addr: str, now_millis: int,
                        data_version: DataVersion | None = None,
                        topic_configs: dict[str, dict[str, Any]] | None = None,
                        filter_servers: tuple[str, ...] = (), connection: Any = None,
                        timeout_millis: int | None = None) -> RegisterBrokerResult:
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker = self.broker_addr_table.get(broker_name)
        first = broker is None
        addrs = dict(broker.broker_addrs) if broker else {}
        # A slave promoted to master (or the reverse) keeps its address under a new id.
        for other_id, addr in list(addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del addrs[other_id]
        first = first or addrs.get(broker_id) is None
        addrs[broker_id] = broker_addr
        self.broker_addr_table[broker_name] = BrokerData(cluster_name, broker_name, addrs)

        key = (cluster_name, broker_addr)
        version = data_version or DataVersion(timestamp=now_millis)
        if (topic_configs is not None and broker_id == MASTER_ID
                and (first or self.is_topic_config_changed(key, version))):
            for topic, config in topic_configs.items():
                self._update_queue_data(broker_name, topic, config)
        previous = self.broker_live_table.get(key)
        slave_topics = topic_configs if broker_id != MASTER_ID else None
        if slave_topics is None and previous is not None and broker_id != MASTER_ID:
            slave_topics = previous.topic_configs
        self.broker_live_table[key] = BrokerLiveInfo(
            now_millis, timeout_millis or self.default_timeout_millis, version, ha_server_addr,
            connection, slave_topics)
        if slave_topics and MASTER_ID not in addrs:
            self._fill_in_topics(broker_name, slave_topics)
        if previous is None:
            log.info("new broker registered %s %s (%s id %d)", cluster_name, broker_addr,
                     broker_name, broker_id)
        if filter_servers:
            self.filter_server_table[key] = list(filter_servers)
        else:
            self.filter_server_table.pop(key, None)

        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            master = self.broker_live_table.get((cluster_name, master_addr)) if master_addr else None
            if master is not None:
                return RegisterBrokerResult(master.ha_server_addr, master_addr)
        return RegisterBrokerResult()

    def is_topic_config_changed(self, key: BrokerKey, data_version: DataVersion) -> bool:
        live = self.broker_live_table.get(key)
        return live is None or live.data_version != data_version

    def touch(self, key: BrokerKey, now_millis: int) -> None:
        """QUERY_DATA_VERSION counts as a heartbeat."""
        live = self.broker_live_table.get(key)
        if live is not None:
            live.last_update_millis = now_millis

    def _update_queue_data(self, broker_name: str, topic: str, config: dict[str, Any]) -> None:
        queue = QueueData(broker_name, int(config.get("readQueueNums", 16)),
                          int(config.get("writeQueueNums", 16)), int(config.get("perm", 6)),
                          int(config.get("topicSysFlag", 0)))
        queues = self.topic_queue_table.setdefault(topic, {})
        if queues.get(broker_name) != queue:
            if broker_name in queues:
                log.info("topic %s queue data changed: %s", topic, queue)
            queues[broker_name] = queue

    def _fill_in_topics(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        """A masterless group's slave serves these: route the topics that have no queue data
        for the group yet (what the master registered stays as it was)."""
        for topic, config in topic_configs.items():
            if broker_name not in self.topic_queue_table.get(topic, {}):
                log.info("topic %s routed to %s from its slave's registration (no master)", topic, broker_name)
                self._update_queue_data(broker_name, topic, config)

    def unregister_broker(self, *, cluster_name: str, broker_addr: str, broker_name: str,
                          broker_id: int) -> None:
        key = (cluster_name, broker_addr)
        self.broker_live_table.pop(key, None)
        self.filter_server_table.pop(key, None)
        broker = self.broker_addr_table.get(broker_name)
        if broker is not None and broker.broker_addrs.get(broker_id) == broker_addr:
            addrs = {i: a for i, a in broker.broker_addrs.items() if i != broker_id}
            self._set_addrs(broker, addrs)
        log.info("broker unregistered %s %s (%s id %d)", cluster_name, broker_addr, broker_name,
                 broker_id)

    def _set_addrs(self, broker: BrokerData, addrs: dict[int, str]) -> None:
        if addrs:
            self.broker_addr_table[broker.broker_name] = BrokerData(broker.cluster, broker.broker_name, addrs)
            if MASTER_ID in broker.broker_addrs and MASTER_ID not in addrs:  # the master is gone
                for addr in addrs.values():
                    live = self.broker_live_table.get((broker.cluster, addr))
                    if live is not None and live.topic_configs:
                        self._fill_in_topics(broker.broker_name, live.topic_configs)
            return
        del self.broker_addr_table[broker.broker_name]
        names = self.cluster_addr_table.get(broker.cluster)
        if names is not None:
            names.discard(broker.broker_name)
            if not names:
                del self.cluster_addr_table[broker.cluster]
        self._remove_topics_of(broker.broker_name)

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            queues = self.topic_queue_table[topic]
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    def scan_not_active_brokers(self, now_millis: int) -> list[BrokerKey]:
        """Drop brokers whose last registration is older than their timeout; close their
        connections. Returns what was dropped."""
        expired = [key for key, live in self.broker_live_table.items()
                   if live.last_update_millis + live.timeout_millis < now_millis]
        for key in expired:
            live = self.broker_live_table[key]
            log.warning("broker %s expired: no registration for %d ms", key[1],
                        now_millis - live.last_update_millis)
            if live.connection is not None:
                live.connection.close()
            self._destroy(key)
        return expired

    def on_connection_closed(self, connection: Any) -> None:
        for key, live in list(self.broker_live_table.items()):
            if live.connection is connection:
                log.info("broker %s connection closed", key[1])
                self._destroy(key)

    def _destroy(self, key: BrokerKey) -> None:
        cluster_name, broker_addr = key
        self.broker_live_table.pop(key, None)
        self.filter_server_table.pop(key, None)
        for broker in list(self.broker_addr_table.values()):
            if broker.cluster != cluster_name:
                continue
            addrs = {i: a for i, a in broker.broker_addrs.items() if a != broker_addr}
            if addrs != broker.broker_addrs:
                self._set_addrs(broker, addrs)

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers = [self.broker_addr_table[name] for name in sorted(queues)
                   if name in self.broker_addr_table]
        if not brokers:
            return None
        filter_servers: dict[str, list[str]] = {}
        for broker in brokers:
            for addr in broker.broker_addrs.values():
                servers = self.filter_server_table.get((broker.cluster, addr))
                if servers:
                    filter_servers[addr] = list(servers)
        return TopicRouteData(tuple(queues[name] for name in sorted(queues)), tuple(brokers),
                              filter_server_table=filter_servers)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(dict(self.broker_addr_table),
                           {c: frozenset(names) for c, names in self.cluster_addr_table.items()})

    def all_topics(self) -> tuple[str, ...]:
        return tuple(sorted(self.topic_queue_table))

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        if cluster_name is None:
            self.topic_queue_table.pop(topic, None)
            return
        queues = self.topic_queue_table.get(topic, {})
        for name in self.cluster_addr_table.get(cluster_name, set()):
            queues.pop(name, None)
        if not queues:
            self.topic_queue_table.pop(topic, None)
