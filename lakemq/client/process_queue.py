"""ProcessQueue: a consumer's cache of pulled, not yet consumed messages of one queue.

Messages are kept by queue offset. The committed offset of a queue is the smallest offset
still in flight (or one past the largest seen when nothing is), so a crash re-delivers
what was not finished and never skips it. The cache's size drives consumer flow control.
Orderly consumption takes messages out in offset order into a "consuming" set and commits
or puts them back as a whole.

The event loop caches what it pulls and consume threads remove what their listener finished
(as RocketMQ's ProcessQueue, under one lock). Pulls arrive in offset order, so the cache's
dict holds its offsets ascending: its first and last keys are the smallest and largest, found
without a scan (a scan is made only after an out-of-order insert, until the cache empties).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
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
        self._lock = threading.Lock()
        self._msgs: dict[int, MessageExt] = {}
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        # _msgs' keys went in ascending (the usual case): its first key is its smallest, its
        # last the largest. _last_key: the largest key put since the cache was last empty.
        self._ascending = True
        self._last_key = -1
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
        with self._lock:
            cache, consuming = self._msgs, self._consuming
            if not cache:
                self._ascending, self._last_key = True, -1
            last = self._last_key
            for m in msgs:
                offset = m.queue_offset
                if offset in cache or offset in consuming:
                    continue
                if offset > last:
                    last = offset
                else:
                    self._ascending = False
                cache[offset] = m
                self.msg_size += len(m.body)
                added += 1
            self._last_key = last
            self.queue_offset_max = max(self.queue_offset_max, last)
        return added

    def remove_messages(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset safe to commit, -1 if nothing cached."""
        with self._lock:
            cache = self._msgs
            if not cache and not self._consuming:
                return -1
            for m in msgs:
                if cache.pop(m.queue_offset, None) is not None:
                    self.msg_size -= len(m.body)
            self.last_consume_timestamp = _now_ms()
            return self._committable()

    def committable_offset(self) -> int:
        with self._lock:
            return self._committable()

    def _committable(self) -> int:
        low = self._lowest()
        if self._consuming:
            low = min(self._consuming) if low is None else min(low, min(self._consuming))
        return self.queue_offset_max + 1 if low is None else low

    def _lowest(self) -> int | None:
        cache = self._msgs
        if not cache:
            return None
        return next(iter(cache)) if self._ascending else min(cache)

    @property
    def msg_count(self) -> int:
        return len(self._msgs) + len(self._consuming)

    def max_span(self) -> int:
        with self._lock:
            cache = self._msgs
            if not cache:
                return 0
            if self._ascending:
                return next(reversed(cache)) - next(iter(cache))
            return max(cache) - min(cache)

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
        with self._lock:
            cache = self._msgs
            offsets = list(itertools.islice(cache, batch_size)) if self._ascending else sorted(cache)[:batch_size]
            for offset in offsets:
                m = cache.pop(offset)
                self._consuming[offset] = m
                taken.append(m)
            self.last_consume_timestamp = _now_ms()
        return taken

    def commit(self) -> int:
        """Orderly success: the consuming set is done; returns the next offset or -1."""
        with self._lock:
            if not self._consuming:
                return -1
            offset = max(self._consuming) + 1
            self.msg_size -= sum(len(m.body) for m in self._consuming.values())
            self._consuming.clear()
            return offset

    def make_message_to_consume_again(self, msgs: list[MessageExt]) -> None:
        with self._lock:
            for m in msgs:
                taken = self._consuming.pop(m.queue_offset, None)
                if taken is not None:
                    self._ascending = False  # back in after what was cached meanwhile
                    self._msgs[m.queue_offset] = taken

    def has_pending(self) -> bool:
        return bool(self._msgs)

    def is_lock_expired(self, now_ms: float | None = None) -> bool:
        return (now_ms if now_ms is not None else _now_ms()) - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME_MS

    def clear(self) -> None:
        with self._lock:
            self._msgs.clear()
            self._consuming.clear()
            self.msg_size = 0
