"""A short run of bench/lake_lag_bench.py (not timed: the figures are only checked to be there
and sane), so a change that breaks the lake-lag benchmark fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# `lakemq tier serve` starts its own driver.
pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(900)  # tier serve's driver, warm-up pass and lake service, on a loaded machine
def test_lake_lag_bench_measures_the_lag_of_every_message() -> None:
    proc = subprocess.run([sys.executable, "bench/lake_lag_bench.py", "--rate", "100", "--seconds", "3",
                           "--interval-ms", "1000", "--senders", "2", "--freshness", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=880, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"lake lag .*, (\d+) messages, .* p50 ([\d.]+) s, p99 ([\d.]+) s, max ([\d.]+) s", proc.stdout)
    assert found, proc.stdout
    count, p50, p99, most = int(found[1]), float(found[2]), float(found[3]), float(found[4])
    assert count >= 200 and 0 <= p50 <= p99 <= most < 120, proc.stdout
    # Each probe's query started after its send was acknowledged: it sees the message.
    fresh = re.search(r"freshness .*: (\d+) of (\d+) messages visible .* p50 ([\d.]+) s", proc.stdout)
    assert fresh and fresh[1] == fresh[2] == "2", proc.stdout
    answers = re.search(r"each answer \(s; \* = a tier pass was under way\): (.+)$", proc.stdout, re.MULTILINE)
    assert answers and len(answers[1].split(", ")) == 2, proc.stdout
    # The producers of the bench's one process leave without closing connections under each other.
    assert "unregister" not in proc.stderr, proc.stderr[-3000:]
