"""Lake lag: how long after the broker stores a message its row is committed to the lake, with
``lakemq tier serve`` running beside a broker that takes a steady stream.

    python bench/lake_lag_bench.py [--rate 5000] [--seconds 600] [--interval-ms 60000]
                                   [--senders 8] [--body 256]

A NameServer and a broker (default 1 GiB CommitLog files, ``tierSealIdleMs`` 10 min: no file
fills or idles during the run) and ``lakemq tier serve`` (Spark ``local[1]``) start in a fresh
directory; ``--senders`` producers send ``--body``-byte messages paced to ``--rate`` msg/s in
all for ``--seconds``; then the bench waits until the lake holds every message and stops the
serve process with SIGTERM. The lag of a message is its Delta commit's timestamp (the commit
info the log holds) minus its ``store_timestamp``; reported as p50, p99 and max over all of
them, with the rate actually sent. The machine is shared by whatever runs on it: BENCHMARKS.md
says what was run where.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.launcher import lakemq_command, start_cluster

BROKER = "broker-a"
TOPIC = "lake_lag"


async def _produce(namesrv: str, rate: int, seconds: float, senders: int, body: bytes) -> int:
    await create_routed_topic(namesrv, TOPIC, queue_nums=8)
    per_sender = rate / senders
    began = time.monotonic()
    stop_at = began + seconds

    async def sender(n: int) -> int:
        sent = 0
        async with Producer(f"lag_producer_{n}", namesrv_addr=namesrv) as producer:
            while (now := time.monotonic()) < stop_at:
                due = began + sent / per_sender  # paced: behind schedule, it sends at once
                if due > now:
                    await asyncio.sleep(due - now)
                await producer.send(Message(TOPIC, body))
                sent += 1
        return sent

    return sum(await asyncio.gather(*(sender(n) for n in range(senders))))


def _rows_in_lake(lake: Path) -> int:
    """Rows of the topic the Delta log's file statistics count (cheap: no data file read)."""
    if not (lake / "messages" / "_delta_log").exists():
        return 0
    rows = 0
    for entry in (lake / "messages" / "_delta_log").glob("*.json"):
        for line in entry.read_text().splitlines():
            add = json.loads(line).get("add") if line.strip() else None
            if add and add.get("dataChange", True) and f"topic={TOPIC}" in add["path"]:
                rows += int(json.loads(add["stats"])["numRecords"])
    return rows


def _commits(lake: Path) -> dict[str, int]:
    """Data file path -> the timestamp (ms) of the Delta commit that added it."""
    added: dict[str, int] = {}
    for entry in sorted((lake / "messages" / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        stamp = next((a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a), None)
        if stamp is None:
            continue
        for a in actions:
            if "add" in a and a["add"].get("dataChange", True):
                added[a["add"]["path"]] = int(stamp)
    return added


def _lags(lake: Path) -> list[int]:
    """Lag (ms) of every message of the topic; a file the table upkeep rewrote is counted
    under the commit that first added its rows, by reading only files the upkeep did not make."""
    lags: list[int] = []
    for path, stamp in _commits(lake).items():
        if f"topic={TOPIC}" not in path:
            continue
        table = pq.read_table(lake / "messages" / path, columns=["store_timestamp"])
        lags += [stamp - t for t in table.column(0).to_pylist()]
    return lags


def _percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="messages per second, all senders")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--interval-ms", type=int, default=60_000, help="tier serve's tierIntervalMs")
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lake-lag-") as tmp:
        root = Path(tmp)
        lake, store = root / "lake", root / BROKER / "store"
        conf = {"lakeUri": str(lake), "tierSealIdleMs": "600000", "tierMaintainIntervalMs": "3600000"}
        with start_cluster(root, brokers=(BROKER,), broker_conf=conf) as cluster:
            tier_conf = root / "tier.conf"
            tier_conf.write_text("".join(f"{k}={v}\n" for k, v in
                                         {"storePathRootDir": str(store), "brokerName": BROKER, **conf}.items()))
            serve = subprocess.Popen(
                lakemq_command("tier", "serve", "-c", str(tier_conf), "--master", "local[1]",
                               "--interval-ms", str(args.interval_ms), "--no-retention"),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env={**os.environ, "LAKEMQ_LOG_DIR": str(root / "serve-logs")})
            try:
                assert serve.stdout is not None
                print(f"tier serve: {serve.stdout.readline().strip()}", flush=True)  # its first pass: Spark is up
                began = time.monotonic()
                sent = asyncio.run(_produce(cluster.namesrv_addr, args.rate, args.seconds, args.senders,
                                            b"x" * args.body))
                took = time.monotonic() - began
                print(f"sent {sent} messages in {took:.1f}s ({sent / took:,.0f} msg/s)", flush=True)
                deadline = time.monotonic() + args.interval_ms / 1000 * 3 + 120
                while (held := _rows_in_lake(lake)) < sent:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the lake holds {held} of {sent} messages after waiting")
                    time.sleep(1)
            finally:
                serve.send_signal(signal.SIGTERM)
                out, _ = serve.communicate(timeout=120)
            passes = [float(m) for m in re.findall(r"; ([\d.]+)s$", out, re.MULTILINE)]
            if passes:
                print(f"tier serve passes: {len(passes) + 1}, seconds each: median {statistics.median(passes):.1f}, "
                      f"max {max(passes):.1f}", flush=True)
            lags = sorted(_lags(lake))
        print(f"lake lag (store -> Delta commit), {len(lags)} messages, {sent / took:,.0f} msg/s sent, "
              f"tierIntervalMs={args.interval_ms}: p50 {_percentile(lags, 0.5) / 1000:.1f} s, "
              f"p99 {_percentile(lags, 0.99) / 1000:.1f} s, max {lags[-1] / 1000:.1f} s")


if __name__ == "__main__":
    main()
