"""The soak's growth judge: a resource that rises and falls with retention's cycle is flat, a
leak is not, whatever samples the window starts and ends on; and a saved run can be judged again."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench.soak import Sample, growth, judge

ROOT = Path(__file__).resolve().parents[2]


def _samples(anon: list[float], rss: list[float], store_open: list[int] | None = None,
             other: list[int] | None = None, deleted: list[int] | None = None) -> list[Sample]:
    n = len(anon)
    store_open, other, deleted = store_open or [60] * n, other or [40] * n, deleted or [0] * n
    return [Sample(t=60.0 * i, rss_mib=r, rss_anon_mib=a, open_files=2 * f + o + d, store_fds=2 * f + d,
                   store_open=f + d, store_deleted_fds=d, other_fds=o, threads=28, loop_lag_ms=1.0,
                   send_p99_ms=5.0, sends=12_000, commitlog_files=50, deleted_files=0)
            for i, (a, r, f, o, d) in enumerate(zip(anon, rss, store_open, other, deleted))]


def test_a_retention_sawtooth_is_flat_and_a_leak_is_not() -> None:
    # RSS climbs for 6 minutes, then retention deletes the files it mapped; the window starts
    # at a trough and ends at a peak, where first-to-last would call it a 70% rise.
    sawtooth = [160 + 20 * (i % 7) for i in range(61)]
    grew = growth(_samples([70.0] * 61, sawtooth), since=0)
    assert abs(grew["rss_mib"]) < 0.01 and grew["rss_anon_mib"] == 0
    leaking = [70 + 0.1 * i for i in range(61)]  # +6 MiB in the hour: 8.6%
    grew = growth(_samples(leaking, sawtooth), since=0)
    assert 0.07 < grew["rss_anon_mib"] < 0.1


def test_descriptors_are_judged_apart_from_the_hot_tiers_size() -> None:
    # The hot tier holds a few more files at the second half's peak: its descriptors follow,
    # two per mapped file; that is not a leak.
    grew = growth(_samples([70.0] * 61, [200.0] * 61, store_open=[60 + (i > 40) * 3 for i in range(61)]), since=0)
    assert grew["store_fds_per_file"] == 0 and grew["other_fds"] == 0
    # A socket a minute never closed is.
    grew = growth(_samples([70.0] * 61, [200.0] * 61, other=[40 + i // 10 for i in range(61)]), since=0)
    assert grew["other_fds"] > 0.05
    # So is a store file opened twice per roll and closed once.
    leaking = _samples([70.0] * 61, [200.0] * 61)
    for i, s in enumerate(leaking):
        s.store_fds += i // 5
    assert growth(leaking, since=0)["store_fds_per_file"] > 0.05


def test_a_descriptor_on_a_deleted_store_file_fails_only_when_it_stays() -> None:
    record = {"groups": {"g": {"lost": 0}}, "rolled_back_seen": 0, "audit_duplicates": 0, "tier_failures": 0,
              "growth_window_from_s": 0.0}
    moment = [1 if i == 58 else 0 for i in range(61)]  # a reader's view, released by the next sample
    record["samples"] = [asdict(s) for s in _samples([70.0] * 61, [200.0] * 61, deleted=moment)]
    assert judge(dict(record))["failures"] == []
    held = [int(i >= 50) for i in range(61)]
    record["samples"] = [asdict(s) for s in _samples([70.0] * 61, [200.0] * 61, deleted=held)]
    assert judge(dict(record))["failures"] == ["1 descriptors on deleted store files stayed open"]


def test_a_saved_run_is_judged_again(tmp_path: Path) -> None:
    record = {"groups": {"g": {"lost": 0}}, "rolled_back_seen": 0, "audit_duplicates": 0, "tier_failures": 0,
              "growth_window_from_s": 600.0,
              "samples": [asdict(s) for s in _samples([70 + 0.1 * i for i in range(121)], [200.0] * 121)]}
    assert judge(dict(record))["failures"] == ["rss_anon_mib grew 14.7% over the window"]  # 71 -> 82 MiB: 15.5%
    saved = tmp_path / "soak.json"
    saved.write_text(json.dumps(record))
    proc = subprocess.run([sys.executable, "bench/soak.py", "--rejudge", str(saved)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "FAILED: rss_anon_mib grew" in proc.stderr, proc.stderr
