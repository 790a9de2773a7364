"""Online consumers per group, from their heartbeats (RocketMQ ConsumerManager).

A channel is whatever the remoting layer hands the processors for a client connection: it
only needs to be hashable. A client that stays silent longer than ``channelExpiredTimeout``
is dropped; whenever a group's members or subscriptions change, the listener is told, and the
broker sends NOTIFY_CONSUMER_IDS_CHANGED to the group's members so they rebalance at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from lakemq.common.subscription import SubscriptionData

__all__ = [
    "ClientChannelInfo",
    "ConsumerGroupEvent",
    "ConsumerGroupInfo",
    "ConsumerIdsChangeListener",
    "ConsumerManager",
    "now_ms",
]

log = logging.getLogger(__name__)


def now_ms() -> int:
    """Monotonic milliseconds: client and lock ages must not jump with the wall clock (a step
    forward expired every client, a step back kept a dead client's queue locks for its size)."""
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ClientChannelInfo:
    channel: Hashable
    client_id: str
    language: str = "JAVA"
    version: int = 0
    remote_addr: str = ""
    last_update_timestamp: int = field(default_factory=now_ms)


class ConsumerGroupEvent(Enum):
    CHANGE = "CHANGE"  # members or subscriptions changed: tell the members to rebalance
    UNREGISTER = "UNREGISTER"  # the last member left
    REGISTER = "REGISTER"  # subscriptions (re)registered


ConsumerIdsChangeListener = Callable[[ConsumerGroupEvent, str, list[Hashable]], None]


@dataclass(slots=True)
class ConsumerGroupInfo:
    group_name: str
    consume_type: str  # CONSUME_ACTIVELY (pull) or CONSUME_PASSIVELY (push)
    message_model: str  # CLUSTERING or BROADCASTING
    consume_from_where: str
    channel_info_table: dict[Hashable, ClientChannelInfo] = field(default_factory=dict)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_timestamp: int = field(default_factory=now_ms)

    def all_client_ids(self) -> list[str]:
        return [info.client_id for info in self.channel_info_table.values()]

    def all_channels(self) -> list[Hashable]:
        return list(self.channel_info_table)

    def update_channel(
        self, info: ClientChannelInfo, consume_type: str, message_model: str, consume_from_where: str
    ) -> bool:
        """Record a heartbeat; True when this channel is new to the group."""
        self.consume_type, self.message_model, self.consume_from_where = (
            consume_type,
            message_model,
            consume_from_where,
        )
        old = self.channel_info_table.get(info.channel)
        self.last_update_timestamp = now_ms()
        if old is None:
            self.channel_info_table[info.channel] = info
            log.info("new consumer %s in group %s from %s", info.client_id, self.group_name, info.remote_addr)
            return True
        if old.client_id != info.client_id:
            log.warning(
                "channel of group %s changed client id %s -> %s",
                self.group_name,
                old.client_id,
                info.client_id,
            )
            old.client_id = info.client_id
        old.last_update_timestamp = info.last_update_timestamp
        return False

    def update_subscription(self, subs: Iterable[SubscriptionData]) -> bool:
        """Replace the subscription table when newer; True when topics were added or dropped."""
        changed = False
        wanted = {}
        for sub in subs:
            wanted[sub.topic] = sub
            old = self.subscription_table.get(sub.topic)
            if old is None:
                self.subscription_table[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscription_table[sub.topic] = sub
        for topic in [t for t in self.subscription_table if t not in wanted]:
            del self.subscription_table[topic]
            changed = True
        self.last_update_timestamp = now_ms()
        return changed


class ConsumerManager:
    def __init__(
        self, listener: ConsumerIdsChangeListener, channel_expired_timeout_ms: int = 120_000
    ) -> None:
        self._listener = listener
        self._expiry_ms = channel_expired_timeout_ms
        self._lock = threading.RLock()
        self._table: dict[str, ConsumerGroupInfo] = {}

    def get_consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self._table.get(group)

    def groups(self) -> dict[str, ConsumerGroupInfo]:
        with self._lock:
            return dict(self._table)

    def find_subscription_data(self, group: str, topic: str) -> SubscriptionData | None:
        info = self._table.get(group)
        return info.subscription_table.get(topic) if info else None

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: Iterable[SubscriptionData],
        notify: bool = True,
    ) -> bool:
        """Record a consumer heartbeat; True when the group's members or topics changed."""
        with self._lock:
            group_info = self._table.get(group)
            if group_info is None:
                group_info = self._table[group] = ConsumerGroupInfo(
                    group, consume_type, message_model, consume_from_where
                )
            new_channel = group_info.update_channel(info, consume_type, message_model, consume_from_where)
            new_topics = group_info.update_subscription(subscriptions)
            channels = group_info.all_channels()
        if (new_channel or new_topics) and notify:
            self._fire(ConsumerGroupEvent.CHANGE, group, channels)
        return new_channel or new_topics

    def unregister_consumer(self, group: str, channel: Hashable, notify: bool = True) -> None:
        with self._lock:
            group_info = self._table.get(group)
            if group_info is None or group_info.channel_info_table.pop(channel, None) is None:
                return
            channels = group_info.all_channels()
            if not channels:
                del self._table[group]
        if not channels:
            self._fire(ConsumerGroupEvent.UNREGISTER, group, [])
        elif notify:
            self._fire(ConsumerGroupEvent.CHANGE, group, channels)

    def do_channel_close_event(self, channel: Hashable) -> None:
        """A connection closed: drop it from every group it was in."""
        for group in [g for g, info in self.groups().items() if channel in info.channel_info_table]:
            self.unregister_consumer(group, channel)

    def scan_not_active_channel(self) -> list[ClientChannelInfo]:
        """Drop clients silent longer than the expiry; returns them so their connections can
        be closed."""
        deadline = now_ms() - self._expiry_ms
        expired: list[tuple[str, ClientChannelInfo]] = []
        with self._lock:
            for group, info in self._table.items():
                expired += [
                    (group, c) for c in info.channel_info_table.values() if c.last_update_timestamp < deadline
                ]
        for group, client in expired:
            log.warning(
                "consumer %s of group %s from %s expired: no heartbeat for %d ms",
                client.client_id,
                group,
                client.remote_addr,
                now_ms() - client.last_update_timestamp,
            )
            self.unregister_consumer(group, client.channel)
        return [client for _, client in expired]

    def query_topic_consume_by_who(self, topic: str) -> set[str]:
        with self._lock:
            return {g for g, info in self._table.items() if topic in info.subscription_table}

    def _fire(self, event: ConsumerGroupEvent, group: str, channels: list[Hashable]) -> None:
        try:
            self._listener(event, group, channels)
        except Exception:  # notification is best effort: clients also rebalance every 20 s
            log.exception("consumer ids change listener failed for group %s", group)
