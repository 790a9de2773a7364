"""A short run of bench/soak.py (the load, one tier run, retention, the sampler and the audit):
the script's own verdict must pass, nothing acknowledged may be lost, and every sample must be
recorded. Too short to be past warm-up, so growth is reported, not judged."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A tier run starts a Spark driver (a minute or more on two shared cores).
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_soak_smoke_loses_nothing_and_records_samples(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "bench/soak.py", "--duration", "36", "--sample-interval", "6", "--tier-interval", "12",
         "--churn", "5", "--rate", "120", "--commitlog-kib", "256", "--no-growth-verdict",
         "--root", str(tmp_path / "run"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == []
    assert result["acknowledged"] > 3000 and result["send_failures"] == 0
    assert {"plain", "delayed", "tx-commit"} <= result["by_kind"].keys() and result["rolled_back"] > 0
    for group in result["groups"].values():
        assert group["lost"] == 0 and group["consumed"] == result["acknowledged"], result["groups"]
    assert result["rolled_back_seen"] == 0 and result["audit_duplicates"] == 0
    assert result["audit_found"] == result["acknowledged"]
    assert result["tier_runs"] >= 1 and result["tier_failures"] == 0
    # Each tier run's steps are on record, maintenance among them (the soak runs them as users do).
    steps = (tmp_path / "run" / "tier-logs" / "tier-runs.out").read_text()
    assert steps.count("maintain") >= result["tier_runs"], steps[-3000:]
    # Retention deleted CommitLog files the lake holds; the audit read those from the lake.
    assert result["lowest_queue_min_offset"] > 0
    assert result["churn_changes"] >= 5
    samples = result["samples"]
    assert len(samples) == 6
    for s in samples:
        assert s["deleted_files"] >= 0
        assert s["rss_mib"] >= s["rss_anon_mib"] > 0 and s["threads"] > 0 and s["sends"] > 0, s
        # The store's mapped files hold descriptors (the file's and the mapping's); the broker
        # also has its sockets and logs.
        assert s["store_fds"] >= s["store_open"] > 0 and s["other_fds"] > 0, s
        assert s["open_files"] == s["store_fds"] + s["other_fds"] and s["store_deleted_fds"] >= 0, s
        assert math.isfinite(s["loop_lag_ms"]) and math.isfinite(s["send_p99_ms"]), s
