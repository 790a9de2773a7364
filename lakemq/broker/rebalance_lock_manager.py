"""Queue locks for orderly consumers (RocketMQ RebalanceLockManager).

An orderly consumer locks its queues on the broker (LOCK_BATCH_MQ) before consuming them, so
that during a rebalance two members of a group never consume one queue at once. A lock not
renewed within ``rebalanceLockMaxLiveTime`` expires and another client may take it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from lakemq.broker.consumer_manager import now_ms
from lakemq.common.message_queue import MessageQueue

__all__ = ["RebalanceLockManager"]


@dataclass(slots=True)
class _LockEntry:
    client_id: str
    last_update_timestamp: int


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = 60_000) -> None:
        self._max_live_ms = max_live_time_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def _held_by(self, entry: _LockEntry | None, client_id: str, now: int) -> bool:
        return (
            entry is not None
            and entry.client_id == client_id
            and now - entry.last_update_timestamp <= self._max_live_ms
        )

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) what is free or already ours; returns the queues ``client_id`` holds."""
        now = now_ms()
        locked: set[MessageQueue] = set()
        with self._lock:
            table = self._table.setdefault(group, {})
            for mq in mqs:
                entry = table.get(mq)
                if (
                    entry is None
                    or entry.client_id == client_id
                    or now - entry.last_update_timestamp > self._max_live_ms
                ):
                    table[mq] = _LockEntry(client_id, now)
                    locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        with self._lock:
            table = self._table.get(group)
            if table is None:
                return
            for mq in mqs:
                entry = table.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del table[mq]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        with self._lock:
            return self._held_by(self._table.get(group, {}).get(mq), client_id, now_ms())
