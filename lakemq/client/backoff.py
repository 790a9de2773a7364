"""Exponential backoff for sends refused by flow control (SYSTEM_BUSY, TOO_MANY_REQUESTS).

Other failures retry at once on another broker; flow control means the broker is
protecting itself, so the producer waits: initial 1 s, x1.6 per attempt, +-20 % jitter,
capped at 120 s (SEEDS_DIGEST section 7).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 1.0
    multiplier: float = 1.6
    jitter: float = 0.2
    max_backoff: float = 120.0

    def base(self, attempt: int) -> float:
        """The un-jittered delay before retry number ``attempt`` (0-based)."""
        return min(self.initial * self.multiplier**attempt, self.max_backoff)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        base = self.base(attempt)
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return min(base * (1 + spread), self.max_backoff)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        attempt = 0
        while True:
            yield self.delay(attempt, rng)
            attempt += 1
