"""Broker benchmark over loopback: a real ``lakemq namesrv`` and ``lakemq broker`` (started
here, stopped at the end) under load from separate client processes.

    .venv/bin/python bench/broker_bench.py [--quick] [--flush ASYNC_FLUSH|SYNC_FLUSH] [--write-md]
                                           [--profile DIR]

Phases: closed-loop sync sends of 1 KiB bodies from 1 and from 16 producers, 16 producers
sending batches of 32 (one SEND_BATCH_MESSAGE each), pull consumption of everything stored,
and end-to-end latency at a fixed rate (open loop, measured from each message's scheduled
send time, received through long-polling pulls).

The load is the broker's, not a client library's: every producer or consumer is one TCP
connection in a thread of its own with a blocking socket, speaking the remoting protocol
through lakemq.remoting's codec (a sync send is a SEND_MESSAGE_V2 request and the wait for
its response). Connections are spread over client processes, so the client side is not
bound by one GIL. ``--profile DIR`` runs the broker with cProfile in every thread and
writes DIR/broker.prof plus a top-40 text summary.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_load import BODY_SIZE, QUEUES, Job, run_jobs
from bench.markdown import replace_section

SECTION = "## Broker (bench/broker_bench.py)"
TARGETS = {"sync_1": 10_000, "sync_16": 50_000, "batch_16x32": 150_000, "consume": 150_000, "p99_ms": 5.0}
NAMESRV_READY = re.compile(r"Name Server boot success\. listening on (\S+?),")
BROKER_READY = re.compile(r"The broker\[[^,]+, (\S+?)\] boot success")


# -- servers -------------------------------------------------------------------------------

def _lakemq(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from lakemq.cli import main; sys.exit(main())", *args]


def _spawn(name: str, cmd: list[str], work: Path, ready: re.Pattern[str]) -> tuple[subprocess.Popen[bytes], str]:
    out_path = work / f"{name}.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=work,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 60
    while True:
        match = ready.search(out_path.read_text(errors="replace"))
        if match:
            return proc, match.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{name} did not boot:\n{out_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def servers(work: Path, flush: str, profile: Path | None) -> Iterator[tuple[str, str, int]]:
    """A NameServer and a broker on loopback; SIGTERM (then SIGKILL) for both on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ns_conf = work / "namesrv.conf"
        ns_conf.write_text(f"kvConfigPath={work / 'kvConfig.json'}\n")  # not the user's ~/namesrv
        ns_proc, ns = _spawn("namesrv", _lakemq("namesrv", "-c", str(ns_conf), "--port", "0", "--log-dir",
                                                str(work / "logs")), work, NAMESRV_READY)
        procs.append(ns_proc)
        conf = work / "broker.conf"
        conf.write_text(f"brokerName=bench-broker\nflushDiskType={flush}\ndefaultTopicQueueNums={QUEUES}\n")
        args = ["broker", "-c", str(conf), "--data-dir", str(work / "store"), "--port", "0", "--namesrv", ns,
                "--log-dir", str(work / "logs")]
        cmd = ([sys.executable, str(Path(__file__).resolve()), "_profiled-broker", str(profile), *args]
               if profile else _lakemq(*args))
        broker_proc, broker = _spawn("broker", cmd, work, BROKER_READY)
        procs.append(broker_proc)
        yield ns, broker, broker_proc.pid
    finally:
        for proc in reversed(procs):
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_profiled_broker(out_dir: Path, argv: list[str]) -> None:
    """``lakemq broker`` with a cProfile per thread (pool threads do the sends and pulls),
    merged into one file when the broker exits. The timer is each thread's CPU time, so
    waiting (for work, for the GIL, in epoll) does not count."""
    from lakemq.cli import main

    profiles: list[cProfile.Profile] = []
    original_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        profiles.append(prof)
        prof.enable()
        try:
            original_run(self)
        finally:
            prof.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main_prof = cProfile.Profile(time.thread_time)
    profiles.append(main_prof)
    main_prof.enable()
    try:
        main(argv)
    except SystemExit:
        pass
    finally:
        for prof in profiles:
            prof.disable()
        out_dir.mkdir(parents=True, exist_ok=True)
        stats = pstats.Stats(*profiles)
        stats.dump_stats(out_dir / "broker.prof")
        with open(out_dir / "broker_top.txt", "w") as f:
            pstats.Stats(str(out_dir / "broker.prof"), stream=f).sort_stats("tottime").print_stats(40)
            pstats.Stats(str(out_dir / "broker.prof"), stream=f).sort_stats("cumulative").print_stats(60)


# -- phases --------------------------------------------------------------------------------

@dataclass
class Settings:
    duration: float
    rate: int
    send_processes: int
    flush: str


def _start_at(processes: int) -> float:
    return time.monotonic() + 1.5 + 0.5 * processes  # spawned clients import lakemq and connect first


def sync_send(broker: str, topic: str, producers: int, batch: int, s: Settings) -> dict[str, float]:
    procs = min(producers, s.send_processes)
    start = _start_at(procs)
    jobs = [Job("send", broker, topic, i, start, s.duration, batch=batch) for i in range(producers)]
    results = run_jobs(jobs, procs)
    messages = sum(r["messages"] for r in results)
    return {"rate": messages / s.duration, "messages": messages, "errors": sum(r["errors"] for r in results),
            "processes": procs, "client_cpu_us": _client_cpu(results) / max(messages, 1) * 1e6}


def _client_cpu(results: list[dict[str, float]]) -> float:
    return sum(r.get("client_cpu", 0.0) for r in results)


def consume(broker: str, topic: str, processes: int = 2) -> dict[str, float]:
    start = _start_at(processes)
    jobs = [Job("pull", broker, topic, q, start, 0.0, queues=(q,)) for q in range(QUEUES)]
    results = run_jobs(jobs, processes)
    messages = sum(r["messages"] for r in results)
    elapsed = max(r["end"] for r in results) - start
    return {"rate": messages / elapsed, "messages": messages, "mb_s": sum(r["bytes"] for r in results) / elapsed / 1e6,
            "seconds": elapsed, "client_cpu_us": _client_cpu(results) / max(messages, 1) * 1e6}


def latency(broker: str, topic: str, rate: int, s: Settings, senders: int = 2) -> dict[str, float]:
    start = _start_at(senders + 2)
    per_sender = rate / senders
    count = int(per_sender * s.duration)
    per_queue = [0] * QUEUES
    for i in range(senders):
        for n in range(count):
            per_queue[(i + n) % QUEUES] += 1
    polls = [Job("poll", broker, topic, q, start, s.duration, queues=(q,), expect=per_queue[q]) for q in range(QUEUES)]
    rates = [Job("rate", broker, topic, i, start, s.duration, rate=per_sender) for i in range(senders)]
    # Senders first in each process list so they are started before the pollers fill it.
    results = run_jobs(polls + rates, senders + 2)
    lat = sorted(x for r in results for x in r.get("latencies", []))
    sent = sum(r.get("sent", 0) for r in results)
    late = max(r.get("late_ms", 0.0) for r in results)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] if lat else float("nan")

    ok = sum(r.get("ok", 0) for r in results)
    return {"rate": rate, "achieved": ok / (s.duration + late / 1000), "late_ms": late, "received": len(lat), "sent": sent, "ok": ok, "p50": pct(50), "p90": pct(90), "p99": pct(99),
            "p999": pct(99.9), "max": lat[-1] if lat else float("nan")}


def create_topics(ns: str, topics: list[str]) -> None:
    import asyncio

    from lakemq.client.admin import Admin

    async def go() -> None:
        async with Admin(ns) as admin:
            for topic in topics:
                await admin.create_topic(topic, queue_nums=QUEUES)

    asyncio.run(go())


# -- report --------------------------------------------------------------------------------

def _ok(value: float, target: float, lower_is_better: bool = False) -> str:
    met = value <= target if lower_is_better else value >= target
    return "met" if met else "**not met**"


def report(r: dict[str, dict[str, float]], s: Settings, command: str) -> str:
    def row(name: str, key: str, target: int, extra: str = "") -> str:
        m = r[key]
        cpu = f"{m['cpu_us']:.0f} us ({m['cpu_us'] * m['rate'] / 1e6:.2f} cores)"
        return (f"| {name} | {m['rate']:,.0f} msg/s{extra} | {cpu} | {m['client_cpu_us']:.0f} us | {target:,} "
                f"| {_ok(m['rate'], target)} |")

    lines = [
        "| measure | result | broker CPU per msg (busy cores) | client CPU per msg | target | |",
        "|---|---:|---:|---:|---:|---|",
        row("sync send, 1 producer", "sync_1", TARGETS["sync_1"]),
        row("sync send, 16 producers", "sync_16", TARGETS["sync_16"]),
        row("batch send, 16 producers x 32", "batch", TARGETS["batch_16x32"]),
        row("pull consumption", "consume", TARGETS["consume"], f" ({r['consume']['mb_s']:.0f} MB/s)"),
    ]
    for key in sorted(k for k in r if k.startswith("latency")):
        lat = r[key]
        lines.append(f"| p99 end to end at {lat['rate']:,.0f} msg/s | {lat['p99']:.2f} ms | | | {TARGETS['p99_ms']} ms "
                     f"| {_ok(lat['p99'], TARGETS['p99_ms'], True)} |")
    lines += ["", ("| latency run | stored msg/s | refused (busy) | received | p50 ms | p90 ms | p99 ms | p99.9 ms "
              "| max ms |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(k for k in r if k.startswith("latency")):
        lat = r[key]
        behind = lat["late_ms"] / 1000 > 0.1 * s.duration  # the senders fell behind their schedule
        if behind or lat["achieved"] < 0.95 * lat["rate"]:
            saturated = " (saturated: sends)"
        elif lat["p50"] > 100:
            saturated = " (saturated: deliveries)"
        else:
            saturated = ""
        lines.append(f"| {lat['rate']:,.0f} msg/s | {lat['achieved']:,.0f}{saturated} | "
                     f"{lat['sent'] - lat['ok']:,.0f} | {lat['received']:,.0f}/{lat['ok']:,.0f} | {lat['p50']:.2f} | {lat['p90']:.2f} | "
                     f"{lat['p99']:.2f} | {lat['p999']:.2f} | {lat['max']:.2f} |")
    busy = [r[k]["cpu_us"] * r[k]["rate"] / 1e6 for k in ("sync_1", "sync_16", "batch", "consume")]
    if min(busy) >= 0.8:
        lines += ["", ("The broker process kept about one core busy in every throughput phase: it is CPU-bound "
                  "(one Python interpreter, one GIL), so each rate above is about 1 / (broker CPU per message).")]
    errors = sum(r[k].get("errors", 0) for k in ("sync_1", "sync_16", "batch"))
    lines += ["", (f"Send errors (non-SUCCESS responses): {errors:.0f}. Consumed {r['consume']['messages']:,.0f} "
              f"messages (all of the batch phase's topic) in {r['consume']['seconds']:.2f} s.")]
    return "\n".join(lines)


def write_md(table: str, s: Settings, command: str, quick: bool, load_at_start: float) -> None:
    smoke = ("**Smoke run** (`--quick`, 2 s phases): too short for stable figures.\n\n" if quick else "")
    body = (
        f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with:\n\n```\n{command}\n```\n\n"
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}. "
        "The broker, the name server and the client processes share these cores; the 1-minute load "
        f"average was {load_at_start:.2f} when the run started (anything else running shows there): treat "
        "the figures as noisy.\n\n"
        f"Setup: one `lakemq namesrv` and one `lakemq broker` (flushDiskType={s.flush}, {QUEUES} queues per "
        f"topic) on loopback, started and stopped by the script. {BODY_SIZE}-byte bodies. Each producer or "
        "consumer is one TCP connection driven by its own thread with a blocking socket, speaking the remoting "
        "protocol with lakemq.remoting's codec (no client library in the way); the connections are spread over "
        f"separate client processes (sends: up to {s.send_processes} processes; pulls: 2). A sync send is one "
        "SEND_MESSAGE_V2 and the wait for its response; a batch is one SEND_BATCH_MESSAGE of 32. "
        f"Throughput phases run {s.duration:g} s each. Consumption pulls (32 per PULL_MESSAGE, one connection "
        "per queue) everything the batch phase stored. Latency: 2 sender processes write sends at fixed "
        "times (open loop, at most 256 in flight per connection), each body carrying its scheduled send "
        "time; one long-polling puller per queue; latency = pull response arrival - scheduled send time, "
        "so queueing behind a saturated broker counts. Client CPU per message is the client processes' "
        "own CPU time (user + system) over the phase, divided by the messages.\n\n" + smoke + table + "\n"
    )
    replace_section(body)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_profiled-broker":
        run_profiled_broker(Path(sys.argv[2]), sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 s phases: a smoke run, not figures to quote")
    ap.add_argument("--duration", type=float, help="seconds per throughput and latency phase [10; --quick 2]")
    ap.add_argument("--rate", type=int, default=10_000, help="latency phase rate, msg/s [10000]")
    ap.add_argument("--send-processes", type=int, default=4, help="client processes for 16 producers [4]")
    ap.add_argument("--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH")
    ap.add_argument("--profile", type=Path, help="profile the broker (cProfile, all threads) into this dir")
    ap.add_argument("--only", choices=["sync_1", "sync_16", "batch", "consume", "latency"],
                    help="run one phase (consume: after the batch phase) for profiling; no report")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    load_at_start = os.getloadavg()[0]
    s = Settings(args.duration or (2.0 if args.quick else 10.0), args.rate, args.send_processes, args.flush)
    work = Path(tempfile.mkdtemp(prefix="broker_bench_"))
    results: dict[str, dict[str, float]] = {}
    try:
        with servers(work, s.flush, args.profile) as (ns, broker, pid):
            create_topics(ns, ["BenchSync", "BenchBatch", *(f"BenchLatency{n}" for n in (1, 2, 3))])
            for key, producers, batch, topic in (("sync_1", 1, 1, "BenchSync"), ("sync_16", 16, 1, "BenchSync"),
                                                 ("batch", 16, 32, "BenchBatch")):
                if args.only not in (None, key) and not (args.only == "consume" and key == "batch"):
                    continue
                cpu = cpu_seconds(pid)
                results[key] = sync_send(broker, topic, producers, batch, s)
                results[key]["cpu_us"] = (cpu_seconds(pid) - cpu) / max(results[key]["messages"], 1) * 1e6
                print(f"{key}: {results[key]['rate']:,.0f} msg/s, broker CPU {results[key]['cpu_us']:.1f} us/msg, "
                      f"client CPU {results[key]['client_cpu_us']:.1f} us/msg ({results[key]['errors']:.0f} errors)",
                      flush=True)
            if args.only == "latency":
                cpu = cpu_seconds(pid)
                lat = latency(broker, "BenchLatency1", s.rate, s)
                print(lat)
                print(f"latency: broker CPU {(cpu_seconds(pid) - cpu) / max(lat['ok'], 1) * 1e6:.1f} us per stored "
                      "message (its send and its delivery)", flush=True)
            if args.only == "consume":
                cpu = cpu_seconds(pid)
                result = consume(broker, "BenchBatch")
                print(f"consume: {result['rate']:,.0f} msg/s, broker CPU "
                      f"{(cpu_seconds(pid) - cpu) / max(result['messages'], 1) * 1e6:.1f} us/msg, client CPU "
                      f"{result['client_cpu_us']:.1f} us/msg", flush=True)
            if args.only:
                return
            cpu = cpu_seconds(pid)
            results["consume"] = consume(broker, "BenchBatch")
            results["consume"]["cpu_us"] = (cpu_seconds(pid) - cpu) / max(results["consume"]["messages"], 1) * 1e6
            print(f"consume: {results['consume']['rate']:,.0f} msg/s, broker CPU {results['consume']['cpu_us']:.1f} "
                  f"us/msg, client CPU {results['consume']['client_cpu_us']:.1f} us/msg", flush=True)
            # The asked rate; if the broker cannot hold it within the target, what it sustains
            # comfortably (half its 16-producer sync throughput) and a light 1,000 msg/s.
            rates = [s.rate]
            results["latency_1"] = latency(broker, "BenchLatency1", s.rate, s)
            print(f"latency at {s.rate}: {results['latency_1']}", flush=True)
            if results["latency_1"]["achieved"] < 0.95 * s.rate or results["latency_1"]["p99"] > TARGETS["p99_ms"]:
                rates += [max(500, int(min(s.rate, results["sync_16"]["rate"]) / 2) // 500 * 500), 1000]
            for n, rate in enumerate(sorted({r for r in rates[1:] if r < s.rate}, reverse=True), start=2):
                results[f"latency_{n}"] = latency(broker, f"BenchLatency{n}", rate, s)
                print(f"latency at {rate}: {results[f'latency_{n}']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python bench/broker_bench.py " + " ".join(sys.argv[1:])
    table = report(results, s, command)
    print(table)
    if args.write_md:
        write_md(table, s, command.replace(" --write-md", ""), args.quick, load_at_start)


if __name__ == "__main__":
    main()
