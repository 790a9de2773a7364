"""ProcessQueue: a consumer's cache of pulled, not yet consumed messages of one queue.

Messages are kept by queue offset. The committed offset of a queue is the smallest offset
still in flight (or one past the largest seen when nothing is), so a crash re-delivers
what was not finished and never skips it. The cache's size drives consumer flow control.
Orderly consumption takes messages out in offset order into a "consuming" set and commits
or puts them back as a whole.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from lakemq.common.message import MessageExt

__all__ = ["PULL_MAX_IDLE_TIME_MS", "REBALANCE_LOCK_MAX_LIVE_TIME_MS", "FlowControl", "ProcessQueue"]

# A broker lock not renewed for this long is treated as lost (RocketMQ: 30 s).
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 30_000
# A queue that has not pulled for this long is dropped and re-created by rebalance.
PULL_MAX_IDLE_TIME_MS = 120_000


def _now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Why pulling pauses; None-like (all False) when it may go on."""

    count: bool = False
    size: bool = False
    span: bool = False

    def __bool__(self) -> bool:
        return self.count or self.size or self.span


class ProcessQueue:
    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self.msg_size = 0
        self.queue_offset_max = -1
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = 0.0
        self.last_pull_timestamp = _now_ms()
        self.last_consume_timestamp = _now_ms()
        # Orderly: held while a batch is in the listener, so a rebalance that takes the queue
        # away releases the broker lock only after that batch (RocketMQ's consumeLock).
        self.consume_lock = asyncio.Lock()

    # -- concurrent and shared --------------------------------------------------------
    def put_messages(self, msgs: list[MessageExt]) -> int:
        """Cache new messages; returns how many were not already cached."""
        added = 0
        for m in msgs:
            if m.queue_offset in self._msgs or m.queue_offset in self._consuming:
                continue
            self._msgs[m.queue_offset] = m
            self.msg_size += len(m.body)
            added += 1
            self.queue_offset_max = max(self.queue_offset_max, m.queue_offset)
        return added

    def remove_messages(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset safe to commit, -1 if nothing cached."""
        if not self._msgs and not self._consuming:
            return -1
        for m in msgs:
            if self._msgs.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        self.last_consume_timestamp = _now_ms()
        return self.committable_offset()

    def committable_offset(self) -> int:
        in_flight = list(self._msgs) + list(self._consuming)
        return min(in_flight) if in_flight else self.queue_offset_max + 1

    @property
    def msg_count(self) -> int:
        return len(self._msgs) + len(self._consuming)

    def max_span(self) -> int:
        keys = list(self._msgs)
        return max(keys) - min(keys) if keys else 0

    def flow_control(self, *, max_count: int, max_size_mib: int, max_span: int | None) -> FlowControl:
        return FlowControl(
            count=self.msg_count > max_count,
            size=self.msg_size > max_size_mib * 1024 * 1024,
            span=max_span is not None and self.max_span() > max_span,
        )

    def is_pull_expired(self, now_ms: float | None = None) -> bool:
        return (now_ms if now_ms is not None else _now_ms()) - self.last_pull_timestamp > PULL_MAX_IDLE_TIME_MS

    # -- orderly -----------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """The next ``batch_size`` messages in offset order, moved to the consuming set."""
        taken = []
        for offset in sorted(self._msgs)[:batch_size]:
            m = self._msgs.pop(offset)
            self._consuming[offset] = m
            taken.append(m)
        self.last_consume_timestamp = _now_ms()
        return taken

    def commit(self) -> int:
        """Orderly success: the consuming set is done; returns the next offset or -1."""
        if not self._consuming:
            return -1
        offset = max(self._consuming) + 1
        self.msg_size -= sum(len(m.body) for m in self._consuming.values())
        self._consuming.clear()
        return offset

    def make_message_to_consume_again(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            taken = self._consuming.pop(m.queue_offset, None)
            if taken is not None:
                self._msgs[m.queue_offset] = taken

    def has_pending(self) -> bool:
        return bool(self._msgs)

    def is_lock_expired(self, now_ms: float | None = None) -> bool:
        return (now_ms if now_ms is not None else _now_ms()) - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME_MS

    def clear(self) -> None:
        self._msgs.clear()
        self._consuming.clear()
        self.msg_size = 0
