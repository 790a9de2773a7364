"""Latency fault tolerance for producers (RocketMQ 4.x MQFaultStrategy).

With ``send_latency_fault_enable`` every send reports its latency; a broker whose send took
at least ``LATENCY_MAX[i]`` ms is avoided for ``NOT_AVAILABLE_DURATION[i]`` ms. A failed
send counts as ``FAILURE_LATENCY_MS`` (30 s -> 10 minutes out). Time is injectable so the
table can be tested without sleeping.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "FAILURE_LATENCY_MS",
    "LATENCY_MAX",
    "NOT_AVAILABLE_DURATION",
    "FaultItem",
    "LatencyFaultTolerance",
    "not_available_duration",
]

LATENCY_MAX: Final = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION: Final = (0, 0, 30000, 60000, 120000, 180000, 600000)
FAILURE_LATENCY_MS: Final = 30000


def not_available_duration(latency_ms: float) -> int:
    """How long (ms) to avoid a broker after a send that took ``latency_ms``."""
    for bound, duration in zip(reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_DURATION)):
        if latency_ms >= bound:
            return duration
    return 0


def _now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(slots=True)
class FaultItem:
    name: str
    current_latency: float
    start_timestamp: float  # available again from this instant (ms on the tolerance's clock)


class LatencyFaultTolerance:
    def __init__(self, clock: Callable[[], float] = _now_ms) -> None:
        self._clock = clock
        self._items: dict[str, FaultItem] = {}

    def update(self, name: str, latency_ms: float, *, isolation: bool = False) -> None:
        """Record a send to broker ``name``; ``isolation`` marks a failure."""
        latency = FAILURE_LATENCY_MS if isolation else latency_ms
        until = self._clock() + not_available_duration(latency)
        item = self._items.get(name)
        if item is None:
            self._items[name] = FaultItem(name, latency, until)
        else:
            item.current_latency = latency
            item.start_timestamp = until

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or self._clock() >= item.start_timestamp

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """When every broker is out: one of the better half (available first, then lower
        latency, then sooner back), chosen at random so producers do not stampede."""
        if not self._items:
            return None
        now = self._clock()
        ranked = sorted(
            self._items.values(),
            key=lambda i: (now < i.start_timestamp, i.current_latency, i.start_timestamp),
        )
        half = max(1, len(ranked) // 2)
        return random.choice(ranked[:half]).name
