"""Online producers per group, from their heartbeats (RocketMQ ProducerManager).

The broker needs them to send transaction check-backs to a live producer of the group and to
list producer connections; a producer silent longer than ``channelExpiredTimeout`` is dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable

from lakemq.broker.consumer_manager import ClientChannelInfo, now_ms

__all__ = ["ProducerManager"]

log = logging.getLogger(__name__)


class ProducerManager:
    def __init__(self, channel_expired_timeout_ms: int = 120_000) -> None:
        self._expiry_ms = channel_expired_timeout_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[Hashable, ClientChannelInfo]] = {}
        self._round_robin = 0

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        with self._lock:
            channels = self._table.setdefault(group, {})
            old = channels.get(info.channel)
            if old is None:
                channels[info.channel] = info
                log.info("new producer %s in group %s from %s", info.client_id, group, info.remote_addr)
            else:
                old.last_update_timestamp = info.last_update_timestamp

    def unregister_producer(self, group: str, channel: Hashable) -> None:
        with self._lock:
            channels = self._table.get(group)
            if channels is None or channels.pop(channel, None) is None:
                return
            if not channels:
                del self._table[group]
            log.info("producer left group %s", group)

    def do_channel_close_event(self, channel: Hashable) -> None:
        with self._lock:
            groups = [g for g, channels in self._table.items() if channel in channels]
        for group in groups:
            self.unregister_producer(group, channel)

    def scan_not_active_channel(self) -> list[ClientChannelInfo]:
        deadline = now_ms() - self._expiry_ms
        with self._lock:
            expired = [
                (g, c)
                for g, channels in self._table.items()
                for c in channels.values()
                if c.last_update_timestamp < deadline
            ]
        for group, client in expired:
            log.warning(
                "producer %s of group %s from %s expired", client.client_id, group, client.remote_addr
            )
            self.unregister_producer(group, client.channel)
        return [client for _, client in expired]

    def get_available_channel(self, group: str) -> ClientChannelInfo | None:
        """A live producer of the group, round robin (for transaction check-backs)."""
        with self._lock:
            channels = list(self._table.get(group, {}).values())
            if not channels:
                return None
            self._round_robin += 1
            return channels[self._round_robin % len(channels)]

    def find_channel(self, client_id: str) -> Hashable | None:
        """The connection of the producer whose heartbeat named ``client_id`` (a request()
        reply is pushed to it)."""
        with self._lock:
            for channels in self._table.values():
                for info in channels.values():
                    if info.client_id == client_id:
                        return info.channel
        return None

    def groups(self) -> dict[str, list[ClientChannelInfo]]:
        with self._lock:
            return {g: list(channels.values()) for g, channels in self._table.items()}
