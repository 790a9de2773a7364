"""Administration over the wire: topics, queue offsets and consumer progress (a small
mqadmin). Talks to the name server for the cluster and to every master broker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Self

from lakemq.client.acl import rpc_hook_for
from lakemq.client.client_api import MQClientAPI
from lakemq.client.config import ClientConfig
from lakemq.client.route import subscribe_queues
from lakemq.common.codes import RequestCode
from lakemq.common.constants import MASTER_ID
from lakemq.common.message import MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import decode_message_id
from lakemq.common.validation import check_group, check_topic
from lakemq.errors import LakeMQError, TopicNotExistError
from lakemq.remoting import RemotingClient, fastjson
from lakemq.remoting.bodies import KVTable

__all__ = ["BROKER_QUERY_MAX", "Admin", "MessageQuery", "QueueProgress", "QueueStats", "message_order"]

# The most a broker returns for one QUERY_MESSAGE (RocketMQ's maxMsgsNumBatch, 64 by default).
BROKER_QUERY_MAX = 64


@dataclass(frozen=True, slots=True)
class QueueStats:
    mq: MessageQueue
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    mq: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)


def message_order(msg: MessageExt) -> tuple[int, str, int]:
    """A look-up's order: store time, then CommitLog order (one CommitLog per store host)."""
    return msg.store_timestamp, msg.store_host, msg.commit_log_offset


@dataclass(frozen=True, slots=True)
class MessageQuery:
    """What a QUERY_MESSAGE look-up found, and whether a limit cut it: ``more`` when more
    messages matched than ``messages`` holds; ``capped`` when a broker returned as many as it
    returns at once (BROKER_QUERY_MAX), so more may match than any limit shows."""

    messages: list[MessageExt]
    more: bool
    capped: bool


class Admin:
    def __init__(self, namesrv_addr: str | None = None, timeout_ms: int = 5000, *,
                 access_key: str = "", secret_key: str = "") -> None:
        config = ClientConfig(access_key=access_key, secret_key=secret_key)
        if namesrv_addr:
            config = dataclasses.replace(config, namesrv_addr=namesrv_addr)
        self._remoting = RemotingClient(namesrv_addrs=config.namesrv_addrs)
        self.api = MQClientAPI(self._remoting, timeout_ms, rpc_hook_for(config))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._remoting.shutdown()

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, optionally of one cluster."""
        info = await self.api.get_broker_cluster_info()
        brokers: dict[str, Any] = info.get("brokerAddrTable") or {}
        names = set(brokers)
        if cluster is not None:
            clusters = info.get("clusterAddrTable") or {}
            if cluster not in clusters:
                raise LakeMQError(f"cluster {cluster} is unknown to the name server")
            names &= set(clusters[cluster])
        result = {}
        for name in sorted(names):
            addrs = {int(k): v for k, v in (brokers[name].get("brokerAddrs") or {}).items()}
            if MASTER_ID in addrs:
                result[name] = addrs[MASTER_ID]
        return result

    async def create_topic(self, topic: str, *, queue_nums: int = 4, order: bool = False,
                           cluster: str | None = None, perm: int = 6) -> list[str]:
        """Create (or update) ``topic`` on every master; returns the broker names."""
        check_topic(topic)
        if not 0 < queue_nums <= 1024:
            raise LakeMQError(f"queue count {queue_nums} is not within 1..1024")
        if perm not in (2, 4, 6):
            raise LakeMQError(f"perm {perm} is not 2 (write), 4 (read) or 6 (read and write)")
        masters = await self.masters(cluster)
        if not masters:
            raise LakeMQError("no master broker is registered with the name server")
        for addr in masters.values():
            await self.api.create_topic(addr, topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                                        perm=perm, order=order)
        return sorted(masters)

    async def list_topics(self) -> list[str]:
        return await self.api.get_all_topic_list()

    async def topic_stats(self, topic: str) -> list[QueueStats]:
        route = await self.api.get_topic_route(check_topic(topic))
        if route is None:
            raise LakeMQError(f"topic {topic} does not exist")
        stats = []
        for mq in subscribe_queues(topic, route):
            broker = route.broker(mq.broker_name)
            addr = broker.select_addr() if broker else None
            if addr is None:
                continue
            stats.append(QueueStats(mq, await self.api.get_min_offset(addr, mq), await self.api.get_max_offset(addr, mq)))
        return stats

    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        check_group(group)
        rows: list[QueueProgress] = []
        for addr in (await self.masters()).values():
            try:
                table = await self.api.get_consume_stats(addr, group, topic)
            except TopicNotExistError:
                continue  # the topic lives on other brokers only
            rows.extend(QueueProgress(mq, int(v.get("brokerOffset", 0)), int(v.get("consumerOffset", 0)),
                                      int(v.get("lastTimestamp", 0))) for mq, v in table.items())
        if topic and not rows:
            raise LakeMQError(f"topic {topic} does not exist")
        return sorted(rows, key=lambda r: r.mq)

    async def query_message(self, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0,
                            end_ms: int | None = None, unique_key: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` (or UNIQ_KEY ``key``) stored in [begin_ms, end_ms],
        from every master that serves the topic: the newest ``max_num``, listed oldest first
        (store time, then CommitLog order), as a broker's IndexFile answers newest first."""
        found = await self.query_message_limited(topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms,
                                                 unique_key=unique_key)
        return found.messages

    async def query_message_limited(self, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0,
                                    end_ms: int | None = None, unique_key: bool = False) -> MessageQuery:
        """As query_message, saying whether ``max_num`` (or a broker's own limit) cut the result:
        each broker is asked for one message more than ``max_num``."""
        route = await self.api.get_topic_route(check_topic(topic))
        if route is None:
            raise LakeMQError(f"topic {topic} does not exist")
        end = end_ms if end_ms is not None else 2**63 - 1
        asked = max_num + 1
        found: dict[str, MessageExt] = {}
        capped = False
        for broker in route.broker_datas:
            addr = broker.select_addr()
            if addr is None:
                continue
            msgs = await self.api.query_message(addr, topic, key, max_num=asked, begin_ms=begin_ms, end_ms=end,
                                                unique_key=unique_key)
            capped |= asked > BROKER_QUERY_MAX and len(msgs) >= BROKER_QUERY_MAX
            for msg in msgs:
                found[msg.msg_id] = msg
        ordered = sorted(found.values(), key=message_order)
        return MessageQuery(ordered[-max_num:], len(ordered) > max_num, capped)

    async def view_message(self, msg_id: str) -> MessageExt:
        """The message with offset message id ``msg_id`` (store host + CommitLog offset)."""
        addr, offset = decode_message_id(msg_id)
        return await self.api.view_message(addr, offset)

    async def cluster_info(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO as the name server answers it (brokerAddrTable, clusterAddrTable)."""
        return await self.api.get_broker_cluster_info()

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's key/value table (offsets, pools, store dir)."""
        response = await self.api._ok(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return KVTable.decode(response.body).table

    async def topic_configs(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_TOPIC_CONFIG: topic name -> TopicConfig JSON (queue counts, perm, order)."""
        response = await self.api._ok(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        return dict(fastjson.loads(response.body or b"{}").get("topicConfigTable") or {})

    async def subscription_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group name -> SubscriptionGroupConfig JSON."""
        response = await self.api._ok(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        return dict(fastjson.loads(response.body or b"{}").get("subscriptionGroupTable") or {})

    async def resume_half_messages(self, addr: str, records: bytes, timeout_ms: int = 30_000) -> list[dict[str, Any]]:
        """LAKEMQ_RESUME_HALF_MESSAGES: hand half message records (CommitLog format) back to the
        broker that stored them; one verdict per record, in order (see broker/transaction/lake_resume)."""
        response = await self.api._ok(addr, RequestCode.LAKEMQ_RESUME_HALF_MESSAGES, body=records,
                                      timeout_ms=timeout_ms)
        return list(fastjson.loads(response.body or b"{}").get("verdicts") or [])
