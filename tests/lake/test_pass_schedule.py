"""tier serve's pass schedule: tierIntervalMs bounds the lake lag, not the time between passes."""

from __future__ import annotations

import itertools
import random

import pytest

from lakemq.tiering.pass_schedule import PassSchedule


def _worst_lag(target_s: float, passes: list[float]) -> float:
    """The longest a record flushed just after one pass's cut waits for its commit, passes
    lasting ``passes`` in turn and each wait as the schedule says."""
    schedule = PassSchedule(target_s)
    began, worst = 0.0, 0.0
    for this, following in itertools.pairwise(passes):
        ended = began + this
        began_next = ended + schedule.wait_after(this)
        worst = max(worst, began_next + following - began)
        began = began_next
    return worst


def test_steady_passes_keep_every_record_within_the_target() -> None:
    assert _worst_lag(60.0, [6.0] * 50) == pytest.approx(60.0)
    assert _worst_lag(10.0, [1.6] * 50) == pytest.approx(10.0)


def test_a_pass_starts_one_expected_pass_before_the_interval_ends() -> None:
    schedule = PassSchedule(60.0)
    assert schedule.wait_after(6.0) == pytest.approx(48.0)  # 6 s pass + 48 s wait + 6 s pass = 60 s
    assert schedule.wait_after(20.0) == pytest.approx(20.0)  # a slow pass: the next is expected as slow
    assert schedule.expected_pass_s == 20.0
    for _ in range(5):
        schedule.wait_after(6.0)
    assert schedule.expected_pass_s == 6.0  # the slow one is forgotten after five passes


def test_varying_passes_stay_within_the_target_unless_one_outgrows_the_recent_ones() -> None:
    rng = random.Random(7)
    passes = [rng.uniform(5.0, 7.0) for _ in range(200)]
    assert _worst_lag(60.0, passes) <= 60.0 + 2.0  # at most the spread of recent passes over


def test_passes_longer_than_the_target_run_back_to_back() -> None:
    schedule = PassSchedule(10.0)
    assert schedule.wait_after(12.0) == 0.0
    assert schedule.wait_after(4.0) == 0.0  # the 12 s pass is still expected


def test_a_target_must_be_positive() -> None:
    with pytest.raises(ValueError, match="target lag"):
        PassSchedule(0)
