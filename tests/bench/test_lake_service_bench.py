"""A short run of bench/lake_service_bench.py (not timed: the figures are only checked to be
there), so a change that breaks the lake service benchmark fails here. It checks on its own
that every command ran on the service (no Spark start) and answered right."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# `lakemq tier serve` starts its own driver.
pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_lake_service_bench_runs_every_command_on_the_service() -> None:
    proc = subprocess.run([sys.executable, "bench/lake_service_bench.py", "--messages", "300", "--runs", "1",
                           "--skip-without"], cwd=ROOT, capture_output=True, text=True, timeout=580, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for command in ("sql", "query", "replay"):
        found = re.search(rf"^{command}: with the service median ([\d.]+)s best ([\d.]+)s; without: not run$",
                          proc.stdout, re.MULTILINE)
        assert found and 0 < float(found[2]) <= float(found[1]), proc.stdout
