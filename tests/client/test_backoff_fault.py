import random

import pytest

from lakemq.client.backoff import Backoff
from lakemq.client.fault import (
    FAILURE_LATENCY_MS,
    LatencyFaultTolerance,
    not_available_duration,
)


def test_backoff_sequence() -> None:
    b = Backoff()
    assert [round(b.base(i), 4) for i in range(5)] == [1.0, 1.6, 2.56, 4.096, 6.5536]
    assert b.base(50) == 120.0
    rng = random.Random(7)
    for attempt in range(12):
        d = b.delay(attempt, rng)
        assert b.base(attempt) * 0.8 - 1e-9 <= d <= min(b.base(attempt) * 1.2, 120.0) + 1e-9
    gen = b.delays(random.Random(1))
    first = [next(gen) for _ in range(30)]
    assert all(d <= 120.0 for d in first) and first[-1] >= 96.0


@pytest.mark.parametrize(
    ("latency", "duration"),
    [(0, 0), (49, 0), (99, 0), (549, 0), (550, 30000), (999, 30000), (1000, 60000),
     (2000, 120000), (3000, 180000), (14999, 180000), (15000, 600000), (FAILURE_LATENCY_MS, 600000)],
)
def test_latency_table(latency: int, duration: int) -> None:
    assert not_available_duration(latency) == duration


def test_fault_tolerance_timing() -> None:
    now = [1_000_000.0]
    ft = LatencyFaultTolerance(clock=lambda: now[0])
    ft.update("fast", 20)
    ft.update("slow", 1200)  # 60 s out
    ft.update("dead", 5, isolation=True)  # failure: 10 minutes out
    assert ft.is_available("fast") and ft.is_available("never-seen")
    assert not ft.is_available("slow") and not ft.is_available("dead")
    now[0] += 59_999
    assert not ft.is_available("slow")
    now[0] += 1
    assert ft.is_available("slow") and not ft.is_available("dead")
    now[0] += 600_000 - 60_000
    assert ft.is_available("dead")
    ft.update("slow", 10)  # a good send clears it at once
    assert ft.is_available("slow")


def test_pick_one_at_least_prefers_the_better_half() -> None:
    now = [0.0]
    ft = LatencyFaultTolerance(clock=lambda: now[0])
    assert ft.pick_one_at_least() is None
    ft.update("a", 600)
    ft.update("b", 20000)
    ft.update("c", 0, isolation=True)
    ft.update("d", 16000)
    for _ in range(20):
        assert ft.pick_one_at_least() in ("a", "d")
