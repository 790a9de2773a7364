"""Lake lag: how long after the broker stores a message its row is committed to the lake, with
``lakemq tier serve`` running beside a broker that takes a steady stream; with ``--freshness``,
also how soon an acknowledged message is visible to ``lakemq sql``'s live union.

    python bench/lake_lag_bench.py [--rate 5000] [--seconds 600] [--interval-ms 60000]
                                   [--senders 8] [--body 256] [--freshness 0]

A NameServer and a broker (the launcher's 8 MiB CommitLog files, ``tierSealIdleMs`` 10 min: a
full file is sealed when it fills, the rest reaches the lake through the flushed offset) and
``lakemq tier serve`` (Spark ``local[1]``; with ``--freshness``, a slot more for the lake
service's queries: :func:`lakemq.jobs.lake_service.query_slot`) start in a fresh directory;
once serve prints its ready line (after its warm-up pass), ``--senders`` producers send
``--body``-byte messages paced to ``--rate`` msg/s in all for ``--seconds``; then the bench
waits until the lake holds every message and stops the serve process with SIGTERM. The lag of a
message is its Delta commit's timestamp (the commit info the log holds) minus its
``store_timestamp``; reported as p50, p99 and max over all of them, with the rate actually
sent, every pass's rows and seconds, and the 1-minute load average before, during (every 30 s)
and after the stream.

``--freshness N`` (tier serve then also runs its lake service, ``lakeServiceAddr``): while the
producers send, N times (spread over the run) one more message with a unique key is sent and,
the moment its send is acknowledged, a query for that key in ``messages`` starts on a Spark
Connect session of the service that ``lakemq sql -c`` would use (the live union registered on
it once, kept open and warmed by one query first). Reported: the fraction of those queries that
saw their message (every one should: a query reads each queue's hot tail up to the broker's max
offset when it is planned, after the ack) and the ack-to-answer time, p50/p99/max.

The machine is shared by whatever runs on it: BENCHMARKS.md says what was run where.
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
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Self

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.launcher import lakemq_command, reserved_port, start_cluster

BROKER = "broker-a"
TOPIC = "lake_lag"


async def _produce(namesrv: str, rate: int, seconds: float, senders: int, body: bytes) -> int:
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


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _load() -> float:
    return os.getloadavg()[0]


class _LoadLog:
    """The 1-minute load average every 30 s while the stream runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(30):
            self.samples.append(_load())

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class _Freshness:
    """Ack-to-visible probes through the lake service's live union, on a thread of their own
    (Spark Connect calls block) beside the producers: the session is opened and warmed before
    the stream starts (:meth:`wait_warm`), the probes run at even times over it (:meth:`go`)."""

    def __init__(self, namesrv: str, lake: Path, service: str, samples: int, seconds: float) -> None:
        self.namesrv, self.lake, self.service = namesrv, lake, service
        self.samples, self.seconds = samples, seconds
        # (visible to the query started at the ack, ack (monotonic s), ack -> answer s)
        self.results: list[tuple[bool, float, float]] = []
        self.error: BaseException | None = None
        self._warm, self._go = threading.Event(), threading.Event()
        self._began = 0.0
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()

    def wait_warm(self, timeout: float) -> None:
        if not self._warm.wait(timeout) or self.error is not None:
            raise SystemExit(f"the freshness probe did not get a warm session: {self.error!r}")

    def go(self, began: float) -> None:
        self._began = began
        self._go.set()

    def join(self) -> None:
        self._go.set()
        self._thread.join()
        if self.error is not None:
            raise SystemExit(f"the freshness probe failed: {self.error!r}")

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - any failure is reported in the main thread
            traceback.print_exc()  # a Spark error's repr may be empty: the stack says what failed
            self.error = exc
        finally:
            self._warm.set()

    def _run(self) -> None:
        from lakemq.client import SyncProducer
        from lakemq.jobs.lake_service import connect
        from lakemq.jobs.sql import register_remote_live_views

        session, why = connect(self.service)
        if session is None:
            raise RuntimeError(f"the lake service at {self.service} does not answer: {why}")
        try:
            # As `lakemq sql -c` does on the service for a statement naming no other view.
            register_remote_live_views(session, str(self.lake), self.namesrv, views=False)
            run = uuid.uuid4().hex[:8]
            query = f"SELECT count(*) AS n FROM messages WHERE topic = '{TOPIC}' AND keys = '{{key}}'"
            with SyncProducer(f"lag_fresh_{run}", namesrv_addr=self.namesrv) as producer:
                session.sql(query.format(key=f"fresh-{run}-warm"))  # the session's first query
                self._warm.set()
                self._go.wait()
                for i in range(self.samples):
                    due = self._began + (i + 1) * self.seconds / (self.samples + 1)
                    time.sleep(max(0.0, due - time.monotonic()))  # a schedule over the stream, late: at once
                    key = f"fresh-{run}-{i}"
                    msg = Message(TOPIC, b"f" * 256)
                    msg.keys = [key]
                    producer.send(msg)
                    acked = time.monotonic()
                    seen = session.sql(query.format(key=key)).column("n")[0].as_py()
                    self.results.append((seen == 1, acked, time.monotonic() - acked))
        finally:
            session.close()


_PASS_LINE = re.compile(r" pass \d+: committed \d+ range\(s\), (\d+) rows.*; ([\d.]+)s$")


class _ServeLines:
    """tier serve's output lines as they come, each with the monotonic time it arrived, so a
    pass's span is known: it ended when its line came and began its seconds before."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def join(self) -> None:
        self._thread.join()

    def passes(self) -> list[tuple[int, float, float]]:
        """(rows, seconds, ended at) of every pass line."""
        return [(int(m[1]), float(m[2]), at) for at, line in self.lines if (m := _PASS_LINE.search(line))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="messages per second, all senders")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--interval-ms", type=int, default=60_000, help="tier serve's tierIntervalMs")
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--body", type=int, default=256, help="body bytes")
    parser.add_argument("--freshness", type=int, default=0, metavar="N",
                        help="ack-to-visible probes through the lake service's live union (0: none)")
    args = parser.parse_args()
    print(f"1-minute load average at start: {_load():.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lake-lag-") as tmp:
        root = Path(tmp)
        lake, store = root / "lake", root / BROKER / "store"
        conf = {"lakeUri": str(lake), "tierSealIdleMs": "600000", "tierMaintainIntervalMs": "3600000"}
        with start_cluster(root, brokers=(BROKER,), broker_conf=conf) as cluster:
            service = f"127.0.0.1:{reserved_port()}" if args.freshness else ""
            served = {"lakeServiceAddr": service, "namesrvAddr": cluster.namesrv_addr} if service else {}
            tier_conf = root / "tier.conf"
            tier_conf.write_text("".join(f"{k}={v}\n" for k, v in
                                         {"storePathRootDir": str(store), "brokerName": BROKER, **conf,
                                          **served}.items()))
            serve_began = time.monotonic()
            serve = subprocess.Popen(
                lakemq_command("tier", "serve", "-c", str(tier_conf), "--master", "local[1]",
                               "--interval-ms", str(args.interval_ms), "--no-retention"),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env={**os.environ, "LAKEMQ_LOG_DIR": str(root / "serve-logs")})
            lines: _ServeLines | None = None
            try:
                assert serve.stdout is not None
                ready = serve.stdout.readline().strip()
                print(f"tier serve after {time.monotonic() - serve_began:.1f}s: {ready}", flush=True)
                if service:
                    # The service opens once the lake has its tables: after the first pass.
                    while not (line := serve.stdout.readline()).startswith("lake service ready"):
                        if not line:
                            raise SystemExit("tier serve ended before its lake service was ready")
                    print(f"tier serve: {line.strip()}", flush=True)
                lines = _ServeLines(serve.stdout)
                # Before the probe: a query naming a topic without a route fails.
                asyncio.run(create_routed_topic(cluster.namesrv_addr, TOPIC, queue_nums=8))
                fresh = (_Freshness(cluster.namesrv_addr, lake, service, args.freshness, args.seconds)
                         if service else None)
                if fresh is not None:
                    fresh.wait_warm(900)
                    print("freshness probe: its session on the lake service is warm", flush=True)
                load_before = _load()
                began = time.monotonic()
                if fresh is not None:
                    fresh.go(began)
                with _LoadLog() as during:
                    sent = asyncio.run(_produce(cluster.namesrv_addr, args.rate, args.seconds, args.senders,
                                                b"x" * args.body))
                took = time.monotonic() - began
                if fresh is not None:
                    fresh.join()
                    sent += len(fresh.results)
                print(f"sent {sent} messages in {took:.1f}s ({sent / took:,.0f} msg/s)", flush=True)
                deadline = time.monotonic() + args.interval_ms / 1000 * 3 + 120
                while (held := _rows_in_lake(lake)) < sent:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the lake holds {held} of {sent} messages after waiting")
                    time.sleep(1)
                load_after = _load()
            finally:
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=300)
                if lines is not None:
                    lines.join()
            passes = lines.passes() if lines is not None else []
            with_data = [secs for rows, secs, _ in passes if rows]
            print(f"tier serve passes: {len(passes)}, {len(with_data)} with rows; rows and seconds each: "
                  + ", ".join(f"{rows} {secs:.1f}s" for rows, secs, _ in passes), flush=True)
            if with_data:
                rest = with_data[1:] or [0.0]
                print(f"first pass with rows {with_data[0]:.1f}s; the later ones median "
                      f"{statistics.median(rest):.1f}s, max {max(rest):.1f}s", flush=True)
            lags = sorted(_lags(lake))
        print(f"1-minute load average: {load_before:.1f} before the stream, "
              f"{', '.join(f'{x:.1f}' for x in during.samples)} during it (every 30 s), {load_after:.1f} after")
        print(f"lake lag (store -> Delta commit), {len(lags)} messages, {sent / took:,.0f} msg/s sent, "
              f"tierIntervalMs={args.interval_ms}: p50 {_percentile(lags, 0.5) / 1000:.1f} s, "
              f"p99 {_percentile(lags, 0.99) / 1000:.1f} s, max {lags[-1] / 1000:.1f} s")
        if fresh is not None and fresh.results:
            answers = sorted(secs for _, _, secs in fresh.results)
            visible = sum(seen for seen, _, _ in fresh.results)
            print(f"freshness through the live union (lake service): {visible} of {len(fresh.results)} messages "
                  f"visible to the query started at their ack; ack -> answer p50 {_percentile(answers, 0.5):.2f} s, "
                  f"p99 {_percentile(answers, 0.99):.2f} s, max {answers[-1]:.2f} s")
            # A probe's query shares the service's Spark cores with the passes: say which met one.
            met = [any(end - secs < acked + took and acked < end for _, secs, end in passes)
                   for _, acked, took in fresh.results]
            print("each answer (s; * = a tier pass was under way): "
                  + ", ".join(f"{took:.2f}{'*' if hit else ''}" for (_, _, took), hit in zip(fresh.results, met)))


if __name__ == "__main__":
    main()
