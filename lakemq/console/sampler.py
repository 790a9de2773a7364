"""Periodic samples the console keeps in memory: consumer lag per group (for the lag chart)
and message counts per topic (for TPS). Ring buffers, so memory stays bounded."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["LagPoint", "Sampler"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LagPoint:
    at_ms: int
    total: int
    per_queue: dict[str, int]  # "broker:queue" -> lag


class Sampler:
    """Keeps ``capacity`` lag points per group and the last two message counts per topic."""

    def __init__(self, capacity: int = 360, max_topics: int = 500) -> None:
        self.capacity = capacity
        self.max_topics = max_topics
        self._lag: dict[str, deque[LagPoint]] = {}
        self._counts: dict[str, deque[tuple[float, int]]] = {}

    def record_lag(self, group: str, per_queue: dict[str, int], at_ms: int | None = None) -> None:
        ring = self._lag.setdefault(group, deque(maxlen=self.capacity))
        ring.append(LagPoint(at_ms if at_ms is not None else int(time.time() * 1000), sum(per_queue.values()),
                             per_queue))

    def lag_history(self, group: str) -> list[LagPoint]:
        return list(self._lag.get(group, ()))

    def record_count(self, topic: str, messages: int, at: float | None = None) -> None:
        if topic not in self._counts and len(self._counts) >= self.max_topics:
            self._counts.pop(next(iter(self._counts)))  # forget the topic watched longest ago
        ring = self._counts.setdefault(topic, deque(maxlen=2))
        ring.append((at if at is not None else time.monotonic(), messages))

    def watched_topics(self) -> list[str]:
        return list(self._counts)

    def tps(self, topic: str) -> float | None:
        """Messages per second between the last two samples, or None before two samples."""
        ring = self._counts.get(topic)
        if not ring or len(ring) < 2:
            return None
        (t0, n0), (t1, n1) = ring
        return max(n1 - n0, 0) / (t1 - t0) if t1 > t0 else None

    async def run(self, interval_s: float, sample: Callable[[], Awaitable[None]]) -> None:
        """Call ``sample`` every ``interval_s`` seconds until cancelled; failures are logged."""
        while True:
            try:
                await sample()
            except Exception:  # a down broker must not stop the sampling of the others
                log.warning("console sampling failed", exc_info=True)
            await asyncio.sleep(interval_s)
