"""Soak: one real broker (with a NameServer and a local lake) under steady load for a set time,
sampled every interval; the verdict is computed and asserted here (exit 1 when it fails).

    .venv/bin/python bench/soak.py --duration 7200 [--sample-interval 60] [--tier-interval 300]
                                   [--rate 200] [--window 3600] [--out soak.json] [--write-md]

The load (bench/soak_load.py): producers sending 1 KiB messages on a fixed schedule, one in
ten delayed (level 1) and one in ten transactional (a quarter of those rolled back); a group
consuming throughout and a group whose consumers join and leave every ``--churn`` seconds;
``lakemq tier run`` every ``--tier-interval`` seconds, and the broker's own guarded retention
deleting every CommitLog file the lake holds (small files, no reserve time), so lagging
consumers and the final audit read the lake below the hot tier.

Every ``--sample-interval`` seconds: the broker's RSS (and its anonymous part: RSS also counts
the store's mapped file pages, which come and go with the CommitLog files), its descriptors
(those on store files, the distinct store files, those on store files already deleted, and
the rest) and threads (from /proc), its worst event-loop lag of the last minute
(lakemq_broker_event_loop_lag_max_seconds), the p99 latency of the plain and delayed sends of
the interval, and the CommitLog files on disk and deleted so far.

Verdict: (1) nothing lost: for each group, acknowledged keys - (keys it consumed | keys a new
group finds reading every queue from its first hot offset, plus the lake's rows below it) is empty, and no rolled-back
message was ever seen; (2) flat: over the last ``--window`` seconds (at most the time after
``--warmup``) RSS, anonymous RSS, descriptors not on store files, store descriptors per open
store file and threads grow under 5 % (the rise of each one's peak from the window's first
half to its second, doubled: see ``growth``), and no descriptor on a deleted store file stays
open through the last minute. The store's descriptors in total follow the hot tier's size,
which retention's cycle moves by a few files between samples.
``--no-growth-verdict`` reports growth without judging it (for the CI smoke, too short to be past
warm-up); ``--rejudge soak.json`` gives the verdict again on a run saved with ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.markdown import replace_section
from bench.soak_load import (
    CHURN,
    STEADY,
    TOPIC,
    Ledger,
    Load,
    TierRuns,
    audit,
    churning_consumers,
    produce,
    steady_consumer,
    tier_runs,
)
from bench.topics import create_routed_topic
from lakemq.launcher import ServerProcess, start_cluster

SECTION = "## Soak (bench/soak.py)"
GROWTH_LIMIT = 0.05
METRICS_URL = re.compile(r", metrics (http://\S+/metrics)")
LOOP_LAG = re.compile(r'^lakemq_broker_event_loop_lag_max_seconds\{[^}]*\} (\S+)$', re.MULTILINE)
DRAIN_TIMEOUT = 180.0


@dataclass
class Sample:
    t: float  # seconds since the load began
    rss_mib: float
    rss_anon_mib: float  # the heap's part of it (the rest is mapped store files the kernel may drop)
    open_files: int  # every descriptor: store_fds + other_fds
    store_fds: int  # on files under the store (each mapped file holds two: its own and the mapping's)
    store_open: int  # distinct store files those descriptors are on
    store_deleted_fds: int  # on store files already deleted (a reader's view may hold one a moment)
    other_fds: int  # sockets, pipes, logs, the lake's files
    threads: int
    loop_lag_ms: float
    send_p99_ms: float
    sends: int
    commitlog_files: int
    deleted_files: int  # CommitLog files retention deleted so far


def _proc_status(pid: int) -> tuple[float, float, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["RssAnon"].split()[0]) / 1024, int(fields["Threads"])


def _descriptors(pid: int, store: Path) -> tuple[int, int, int, int]:
    """(store descriptors, distinct store files, descriptors on deleted store files, the
    rest): the store's descriptors follow the hot tier's files, which retention's cycle raises
    and lowers, so a leak shows in the others or as more descriptors per store file."""
    inside, store_open, deleted, other = 0, set(), 0, 0
    prefix = f"{store}/"
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed since the listing
            continue
        if target.startswith(prefix):
            inside += 1
            store_open.add(target.removesuffix(" (deleted)"))
            deleted += target.endswith(" (deleted)")
        else:
            other += 1
    return inside, len(store_open), deleted, other


def _loop_lag_ms(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        found = LOOP_LAG.search(response.read().decode())
    return float(found.group(1)) * 1000 if found else float("nan")


def _p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def sample(broker: ServerProcess, url: str, ledger: Ledger, began: float, store: Path, seen: set[str]) -> Sample:
    """One sample; ``seen`` collects the CommitLog file names ever seen (deleted = seen - present)."""
    pid = broker.proc.pid
    files = {p.name for p in (store / "commitlog").iterdir()}
    seen |= files
    rss, anon, threads = _proc_status(pid)
    store_fds, store_open, store_deleted, other_fds = _descriptors(pid, store.resolve())
    latencies = ledger.take_latencies()
    return Sample(
        t=round(time.monotonic() - began, 1), rss_mib=round(rss, 1), rss_anon_mib=round(anon, 1),
        open_files=store_fds + other_fds, store_fds=store_fds, store_open=store_open,
        store_deleted_fds=store_deleted, other_fds=other_fds, threads=threads, loop_lag_ms=round(_loop_lag_ms(url), 2), send_p99_ms=round(_p99(latencies), 2),
        sends=len(latencies), commitlog_files=len(files), deleted_files=len(seen - files))


# What the growth verdict judges: the store's descriptors are judged per open store file (a
# mapped file holds two), not in total, which follows the hot tier's size.
JUDGED: dict[str, Callable[[Sample], float]] = {
    "rss_mib": lambda s: s.rss_mib,
    "rss_anon_mib": lambda s: s.rss_anon_mib,
    "other_fds": lambda s: s.other_fds,
    "store_fds_per_file": lambda s: s.store_fds / max(s.store_open, 1),
    "threads": lambda s: s.threads,
}


def growth(samples: list[Sample], since: float) -> dict[str, float]:
    """Relative growth of each judged resource over the window from ``since``: the rise of its
    peak from the window's first half to its second, doubled to span the whole window. RSS and
    open files rise and fall with the CommitLog files retention deletes every few minutes (their
    mapped pages and descriptors), so the first and last samples would measure where in that
    cycle each fell; a leak raises every peak."""
    window = [s for s in samples if s.t >= since]
    if len(window) < 4:
        return {}
    first, second = window[: len(window) // 2], window[len(window) // 2 :]
    grew = {}
    for name, value in JUDGED.items():
        before = max(map(value, first))
        grew[name] = 2 * (max(map(value, second)) - before) / max(before, 1e-9)
    return grew


def held_deleted(samples: list[Sample], since: float, span: float = 60.0) -> int:
    """Descriptors on deleted store files held through the window's last ``span`` seconds (a
    reader's view may keep one a moment; one held that long is leaked)."""
    tail = [s for s in samples if s.t >= max(since, samples[-1].t - span)] if samples else []
    return min((s.store_deleted_fds for s in tail), default=0)


# -- the run ---------------------------------------------------------------------------------

def broker_conf(lake: Path, commitlog_kib: int) -> dict[str, str]:
    """Small CommitLog files the broker's guarded expiry deletes once the lake holds them."""
    return {
        "mappedFileSizeCommitLog": str(commitlog_kib << 10),
        "fileReservedTime": "0",
        "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
        "cleanResourceInterval": "1000",
        "lakeUri": str(lake),
    }


async def _retention_caught_up(store: Path, timeout: float = 60.0) -> None:
    """Wait (bounded) until the broker's clean-up deleted the first CommitLog file, which
    the last tier run put in the lake: the audit then reads the lake below the hot tier."""
    first = store / "commitlog" / f"{0:020d}"
    deadline = time.monotonic() + timeout
    while first.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.5)


async def _drained(ledger: Ledger, timeout: float) -> float:
    """Seconds until both groups consumed every acknowledged key (or the timeout passed)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        with ledger.lock:
            done = all(ledger.acked.keys() <= ledger.consumed[g].keys() for g in (STEADY, CHURN))
        if done:
            break
        await asyncio.sleep(0.5)
    return time.monotonic() - began


async def soak(args: argparse.Namespace, root: Path) -> dict[str, object]:
    lake, store = root / "lake", root / "broker-a" / "store"
    conf = broker_conf(lake, args.commitlog_kib)
    tier_conf = root / "tier.conf"
    tier_conf.write_text("".join(f"{k}={v}\n" for k, v in {
        "storePathRootDir": str(store), "brokerName": "broker-a", "tierSealIdleMs": "1", **conf}.items()))
    with start_cluster(root, broker_conf=conf) as cluster:
        broker = cluster.brokers["broker-a"]
        url = METRICS_URL.findall((broker.work_dir / "broker-a.out").read_text())[-1]
        await create_routed_topic(cluster.namesrv_addr, TOPIC, queue_nums=8)
        load = Load(cluster.namesrv_addr, args.rate, args.producers, args.churn, args.tier_interval,
                    ("tier", "run", "-c", str(tier_conf), "--lake", str(lake), "--master", "local[1]",
                     "--no-retention"), root / "tier-logs")
        ledger, runs, stop, stop_consumers = Ledger(), TierRuns(), asyncio.Event(), asyncio.Event()
        began = time.monotonic()
        tasks = [asyncio.create_task(produce(load, ledger, i, stop)) for i in range(args.producers)]
        tier = asyncio.create_task(tier_runs(load, runs, stop))
        steady = asyncio.create_task(steady_consumer(load, ledger, stop_consumers))
        churn = asyncio.create_task(churning_consumers(load, ledger, stop_consumers))
        samples: list[Sample] = []
        seen: set[str] = set()
        while time.monotonic() - began < args.duration:
            await asyncio.sleep(min(args.sample_interval, max(0.0, began + args.duration - time.monotonic())))
            samples.append(await asyncio.to_thread(sample, broker, url, ledger, began, store, seen))
            print(json.dumps(asdict(samples[-1])), flush=True)
        stop.set()
        await asyncio.gather(*tasks)
        await tier
        if runs.seconds and not runs.failures:
            await _retention_caught_up(store)
        drain_s = await _drained(ledger, DRAIN_TIMEOUT)
        stop_consumers.set()
        await steady
        churn_changes = await churn
        found, lowest_min = await audit(cluster.namesrv_addr, lake)
    return _verdict(args, ledger, runs, samples, found, lowest_min, drain_s, churn_changes)


def _verdict(args: argparse.Namespace, ledger: Ledger, runs: TierRuns, samples: list[Sample],
             found: dict[str, int], lowest_min: int, drain_s: float, churn_changes: int) -> dict[str, object]:
    acked = set(ledger.acked)
    groups: dict[str, dict[str, int]] = {}
    for group in (STEADY, CHURN):
        consumed = ledger.consumed[group]
        groups[group] = {
            "consumed": sum(1 for k in acked if k in consumed),
            "redelivered": sum(n - 1 for n in consumed.values() if n > 1),
            "not_consumed_but_stored": len((acked - consumed.keys()) & found.keys()),
            "lost": len(acked - consumed.keys() - found.keys()),
        }
    rolled_back_seen = len(ledger.rolled_back & (found.keys() | ledger.consumed[STEADY].keys()
                                                   | ledger.consumed[CHURN].keys()))
    kinds = {kind: sum(1 for k in ledger.acked.values() if k == kind) for kind in set(ledger.acked.values())}
    result: dict[str, object] = {
        "duration_s": args.duration, "rate": args.rate, "acknowledged": len(acked), "by_kind": kinds,
        "rolled_back": len(ledger.rolled_back), "rolled_back_seen": rolled_back_seen,
        "send_failures": ledger.send_failures, "groups": groups, "audit_found": len(found),
        "audit_duplicates": sum(n - 1 for n in found.values() if n > 1), "lowest_queue_min_offset": lowest_min,
        "tier_runs": len(runs.seconds), "tier_failures": runs.failures, "tier_last_error": runs.last_error,
        "tier_run_s": [round(s, 1) for s in runs.seconds], "drain_s": round(drain_s, 1),
        "churn_changes": churn_changes, "growth_window_from_s": max(args.warmup, args.duration - args.window),
        "growth_verdict": args.growth_verdict, "samples": [asdict(s) for s in samples],
    }
    return judge(result)


def judge(result: dict[str, Any]) -> dict[str, Any]:
    """The verdict on a run's record (also on one saved with --out: ``--rejudge``): its
    growth over the window and its failures."""
    samples = [Sample(**s) for s in result["samples"]]
    window_start = result["growth_window_from_s"]
    grew = growth(samples, window_start)
    result["growth"] = {k: round(v, 4) for k, v in grew.items()}
    groups = result["groups"]
    failures = [f"{g}: {v['lost']} acknowledged messages lost" for g, v in groups.items() if v["lost"]]
    if result["rolled_back_seen"]:
        failures.append(f"{result['rolled_back_seen']} rolled-back messages were delivered")
    if result["audit_duplicates"]:
        failures.append(f"the audit read {result['audit_duplicates']} messages twice")
    if result["tier_failures"]:
        failures.append(f"{result['tier_failures']} tier runs failed; the last: {result.get('tier_last_error')}")
    if not samples:
        failures.append("no samples")
    if result.get("growth_verdict", True):
        if not grew:
            failures.append(f"fewer than four samples after {window_start:.0f} s: growth cannot be judged")
        failures += [f"{k} grew {v:.1%} over the window" for k, v in grew.items() if v >= GROWTH_LIMIT]
        if leaked := held_deleted(samples, window_start):
            failures.append(f"{leaked} descriptors on deleted store files stayed open")
    result["failures"] = failures
    return result


def _markdown(result: dict[str, object], command: str) -> str:
    samples = result["samples"]
    assert isinstance(samples, list)
    rows = "\n".join(
        f"| {s['t']:.0f} | {s['rss_mib']:.1f} | {s['rss_anon_mib']:.1f} | {s['store_fds']} / {s['store_open']} "
        f"| {s['store_deleted_fds']} | {s['other_fds']} | {s['threads']} | {s['loop_lag_ms']:.1f} "
        f"| {s['send_p99_ms']:.1f} | {s['sends']} | {s['commitlog_files']} | {s['deleted_files']} |" for s in samples)
    return (f"{SECTION}\n\n`{command}`\n\n"
            "| t (s) | RSS (MiB) | anon RSS (MiB) | store fds / files | fds on deleted | other fds | threads "
            "| loop lag max (ms) | send p99 (ms) | sends | CommitLog files | deleted |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            f"{rows}\n\n"
            "```json\n" + json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1) + "\n```\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=7200, help="seconds of load (default 2 h)")
    parser.add_argument("--sample-interval", type=float, default=60)
    parser.add_argument("--tier-interval", type=float, default=300, help="seconds between tier runs")
    parser.add_argument("--rate", type=float, default=200, help="messages per second, all producers")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--churn", type=float, default=30, help="seconds between consumer joins/leaves")
    parser.add_argument("--commitlog-kib", type=int, default=1024, help="CommitLog file size")
    parser.add_argument("--warmup", type=float, default=600, help="seconds not judged for growth")
    parser.add_argument("--window", type=float, default=3600, help="the last seconds judged for growth")
    parser.add_argument("--no-growth-verdict", dest="growth_verdict", action="store_false")
    parser.add_argument("--root", type=Path, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("--write-md", action="store_true", help="write the result into BENCHMARKS.md")
    parser.add_argument("--rejudge", type=Path, metavar="JSON",
                        help="judge again a run saved with --out (the verdict's current rules), no load")
    args = parser.parse_args()
    # A SIGTERM ends the run through its clean-up: the broker and NameServer it started stop too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rejudge is not None:
        result = judge(json.loads(args.rejudge.read_text()))
    elif args.root is not None:
        args.root.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(soak(args, args.root))
    else:
        with tempfile.TemporaryDirectory(prefix="lakemq-soak-") as tmp:
            result = asyncio.run(soak(args, Path(tmp)))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if args.write_md:
        replace_section(_markdown(result, "bench/soak.py " + " ".join(sys.argv[1:])))
    failures = result["failures"]
    assert isinstance(failures, list)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
