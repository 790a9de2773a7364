"""Lake commands end to end, with and without the lake service (``tier serve``'s Spark Connect).

    python bench/lake_service_bench.py [--messages 5000] [--runs 3] [--skip-without] [--write-md]

1. A NameServer and a broker (real processes on loopback, lakemq.launcher) take the demo's
   workload: --messages messages of 1 KiB with keys, a fifth of them (at most 1,000) in a topic
   of their own for replay.
2. ``lakemq tier serve -c broker.conf`` with ``lakeServiceAddr`` starts, tiers everything in its
   first pass and opens Spark Connect; the bench waits for its "lake service ready" line.
3. With the service, --runs times each: ``lakemq sql -c broker.conf`` with one aggregate (the
   live union: the lake plus the hot tails), ``lakemq admin message query --lake --service``
   by key (answered from the lake's index by the command itself, with or without the service), and ``lakemq replay --service`` of the replay topic into another (a new ledger each
   run, so every run sends them all).
4. Without it (unless --skip-without): ``tier serve`` stopped (SIGTERM), each command once
   more, each starting its own driver after one "not reachable" line.

Every figure is the wall time of the whole ``lakemq`` process (interpreter start and imports
included), measured by this script around ``subprocess.run``.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

from bench.markdown import replace_section
from lakemq.client import Message, SyncProducer
from lakemq.launcher import lakemq_command, reserved_port, start_cluster

SECTION = "## Lake service (bench/lake_service_bench.py)"
TOPIC, REPLAY_TOPIC, TARGET = "ServiceBenchOrders", "ServiceBenchReplay", "ServiceBenchReplayed"
BODY = 1024
TARGETS = {"sql": 2.0, "query": 2.0, "replay": 5.0}  # seconds, with the service


def produce(namesrv: str, topic: str, count: int, first: int) -> None:
    with SyncProducer("ServiceBenchProducer", namesrv_addr=namesrv) as producer:
        for start in range(first, first + count, 128):
            msgs = []
            for i in range(start, min(start + 128, first + count)):
                msg = Message(topic, (f"m{i}:".encode() + b"x" * BODY)[:BODY])
                msg.keys, msg.tags = [f"order-{i}"], f"tag{i % 3}"
                msgs.append(msg)
            producer.send_batch(msgs)


def timed(args: Sequence[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.monotonic()
    done = subprocess.run(lakemq_command(*args), capture_output=True, text=True, env=env, timeout=600, check=False)
    seconds = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"lakemq {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each command with the service")
    ap.add_argument("--skip-without", action="store_true", help="do not time the commands without the service")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    opts = ap.parse_args()
    load_at_start = os.getloadavg()[0]
    replayed = min(1000, opts.messages // 5)

    with tempfile.TemporaryDirectory(prefix="service-bench-") as tmp:
        root = Path(tmp)
        lake = root / "lake"
        with start_cluster(root / "cluster", broker_conf={"mappedFileSizeCommitLog": str(64 << 20)}) as cluster:
            ns = cluster.namesrv_addr
            with SyncProducer("ServiceBenchAdmin", namesrv_addr=ns) as admin:
                for topic in (TOPIC, REPLAY_TOPIC, TARGET):
                    admin.create_topic(topic, 4)
            began_ms = int(time.time() * 1000)
            produce(ns, REPLAY_TOPIC, replayed, 0)
            ended_ms = int(time.time() * 1000)
            produce(ns, TOPIC, opts.messages - replayed, replayed)
            addr = f"127.0.0.1:{reserved_port()}"
            conf = root / "broker.conf"
            conf.write_text(f"storePathRootDir={root / 'cluster' / 'broker-a' / 'store'}\nbrokerName=broker-a\n"
                            f"lakeUri={lake}\nnamesrvAddr={ns}\ntierSealIdleMs=1\nlakeServiceAddr={addr}\n")
            env = dict(os.environ, LAKEMQ_LOG_DIR=str(root / "logs"), COLUMNS="200")
            # The replayed copies are in the live union too: the aggregate counts the two source topics.
            aggregate = (f"SELECT tags, count(*) AS n FROM messages WHERE topic IN ('{TOPIC}', '{REPLAY_TOPIC}') "
                         "GROUP BY tags ORDER BY tags")
            sql = ["sql", "-c", str(conf), aggregate]
            query = ["admin", "message", "query", "-n", ns, "-t", TOPIC, "-k", f"order-{opts.messages - 7}",
                     "--lake", str(lake), "--service", addr]

            def replay(run: int) -> list[str]:
                return ["replay", "-n", ns, "--topic", REPLAY_TOPIC, "--target-topic", TARGET, "--from",
                        str(began_ms), "--to", str(ended_ms), "--lake", str(lake), "--checkpoint",
                        str(root / f"ledger-{run}.json"), "--service", addr]

            serve_began = time.monotonic()
            serve = subprocess.Popen(lakemq_command("tier", "serve", "-c", str(conf), "--interval-ms", "600000",
                                                    "--no-retention"),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            assert serve.stdout is not None
            lines: list[str] = []
            while not (line := serve.stdout.readline()).startswith("lake service ready"):
                if not line:
                    raise SystemExit(f"tier serve ended before its service was ready:\n{''.join(lines)}"
                                     f"{serve.stderr.read() if serve.stderr else ''}")
                lines.append(line)
            ready_s = time.monotonic() - serve_began
            with_service: dict[str, list[float]] = {"sql": [], "query": [], "replay": []}
            try:
                for run in range(opts.runs):
                    seconds, done = timed(sql, env)
                    if "starting Spark" in done.stderr or sum(
                            int(v) for v in _counts(done.stdout)) != opts.messages:
                        raise SystemExit(f"sql did not use the service or miscounted:\n{done.stdout}{done.stderr}")
                    with_service["sql"].append(seconds)
                    seconds, done = timed(query, env)
                    if "starting Spark" in done.stderr or "order-" not in done.stdout:
                        raise SystemExit(f"the query did not use the service or found nothing:\n{done.stderr}")
                    with_service["query"].append(seconds)
                    seconds, done = timed(replay(run), env)
                    if "starting Spark" in done.stderr or f"replayed {replayed} message(s)" not in done.stdout:
                        raise SystemExit(f"replay did not use the service or sent another count:\n{done.stdout}")
                    with_service["replay"].append(seconds)
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.communicate(timeout=300)
            without: dict[str, float] = {}
            if not opts.skip_without:
                for name, args in (("sql", sql), ("query", query), ("replay", replay(opts.runs))):
                    seconds, done = timed(args, env)
                    if name == "query":
                        # Answered from the lake's index by the command itself: it asks no
                        # service and starts no driver, so it has nothing to say about one.
                        if "starting Spark" in done.stderr or "order-" not in done.stdout:
                            raise SystemExit(f"the query without the service started Spark or found nothing:\n"
                                             f"{done.stderr}")
                    elif "not reachable" not in done.stderr:
                        raise SystemExit(f"{name} without the service did not say so:\n{done.stderr}")
                    without[name] = seconds
    report(opts, with_service, without, ready_s, replayed, load_at_start)


def _counts(stdout: str) -> list[str]:
    """The n column of the sql's GROUP BY tags table (print_rows: a box table, or n: lines)."""
    values = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 2 and cells[1].isdigit():
            values.append(cells[1])
        elif line.startswith("n: "):
            values.append(line[3:].strip())
    return values


def report(opts: argparse.Namespace, with_service: dict[str, list[float]], without: dict[str, float],
           ready_s: float, replayed: int, load: float) -> None:
    names = {"sql": "`lakemq sql -c` one aggregate (live union)", "query": "`admin message query --lake` by key",
             "replay": f"`replay` of {replayed:,} messages"}
    rows = []
    for key, label in names.items():
        times = with_service[key]
        best, median = min(times), statistics.median(times)
        met = "met" if median <= TARGETS[key] else "**not met**"
        base = f"{without[key]:.1f} s" if key in without else "not run"
        rows.append(f"| {label} | {median:.1f} s (best {best:.1f}) | {base} | <= {TARGETS[key]:.0f} s: {met} |")
        print(f"{key}: with the service median {median:.1f}s best {best:.1f}s; without: {base}")
    print(f"tier serve: first pass and service ready after {ready_s:.1f}s")
    if not opts.write_md:
        return
    command = (f"python bench/lake_service_bench.py --messages {opts.messages} --runs {opts.runs}"
               + (" --skip-without" if opts.skip_without else "") + " --write-md")
    measured = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    machine = f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    replace_section(
        f"{SECTION}\n\nMeasured {measured} UTC with:\n\n```\n{command}\n```\n\n"
        f"Machine: {machine}; 1-minute load average {load:.2f} when the run started (other work shared "
        "the machine; every figure below includes waiting for a core).\n\n"
        f"Workload: the demo's lake, {opts.messages:,} messages of {BODY} bytes through a real broker, "
        "tiered by `lakemq tier serve` with `lakeServiceAddr`, which then serves Spark Connect. Each "
        "figure is the wall time of one whole `lakemq` process (interpreter start, imports, connecting, "
        f"the query or the sends), the median of {opts.runs} runs with the service; without it, one run "
        "after `tier serve` stopped (the command says the service is not reachable and starts Spark).\n\n"
        "| command | with the service | without (own driver) | target |\n|---|---:|---:|---|\n"
        + "\n".join(rows)
        + f"\n\n`tier serve` printed its first pass and \"lake service ready\" {ready_s:.0f} s after it started.\n\n"
        "Where the time with the service goes: the client process (the interpreter, lakemq's CLI and "
        "lakemq's own Spark Connect client: grpc, protobuf and pyarrow, no pyspark, pandas or numpy; no "
        "JVM), then the service's work. For `sql`'s live union that is the `lakemq` data source's "
        "resolution, planning and read in Spark's Python workers, which Spark keeps as one reused daemon "
        "per kind (`tier serve` starts the Connect sessions' ones before it says it is ready); `replay` "
        "reads the Delta table with the JVM alone; `admin message query` finds the rows through the lake's "
        "index and reads them itself (delta-rs and pyarrow), without the service.\n"
    )


if __name__ == "__main__":
    main()
