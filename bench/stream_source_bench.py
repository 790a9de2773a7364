"""Spark Structured Streaming over a backlog: ``spark.readStream.format("lakemq")`` beside
Spark's own Kafka source (spark-sql-kafka-0-10 4.2.0, jvm/spark-kafka), in one run.

    python bench/stream_source_bench.py                      # 100,000 messages, ~5 minutes
    python bench/stream_source_bench.py --messages 20000 --latency-seconds 10 --no-write

A lakemq broker (ASYNC_FLUSH, bench/peers/lakemq_peer.py) and an Apache Kafka 4.4 KRaft node
(bench/peers/kafka_peer.py) each get the same backlog: ``--messages`` bodies of 1 KiB on a topic
of 8 queues (partitions), sent by 16 producers in batches of 32. Then one local Spark session
(local[2]) runs, per source, a query from the earliest offset with ``Trigger.AvailableNow`` and
``maxOffsetsPerTrigger`` into the ``noop`` sink, selecting the body column so every body is
read. lakemq's source runs as a query would read it by default (every column of
``messages``) and with ``.schema("body binary")``, naming the one column the query selects
(PySpark's Python Data Source API prunes no columns: :mod:`lakemq.jobs.live_columns`). Each
query runs twice: the first pass warms the JVM's and Python workers' code paths; the second is
measured (rows / wall time from start() to the end of the last micro-batch).
lakemq's backlog is on the broker only (no tier run: an empty lake), so both sources read from
their broker's log.

Then latency: per source, a query with the default trigger (the next micro-batch as soon as the
last one ends) from the earliest offset of a new, empty topic into a ``foreachBatch`` sink,
while 4 producers send ``--rate`` messages per second in all (default 1,000) for
``--latency-seconds``. Each 1 KiB body starts with its send time (epoch microseconds, taken just
before the send); the sink collects each micro-batch's send times and records, per row, the time
the batch reached it minus the send time. The first ``--latency-warmup`` seconds' messages are
left out (the first micro-batches start the Python workers). p50/p99/max per source. The
sources run one after the other, the same bodies at the same rate. The result replaces the
"## Streaming sources" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `lakemq` importable
    sys.path.insert(0, str(ROOT))

from bench.jvm import BUILD, ensure_groups
from bench.markdown import replace_section
from bench.peers.base import Peer, PeerClient
from bench.peers.kafka_peer import KafkaPeer
from bench.peers.lakemq_peer import LakemqAsyncPeer

TOPIC = "stream-backlog"
LATENCY_TOPIC = "stream-latency"
_HOW = ("lakemq's source is a PySpark Python data source (DataSourceStreamReader): each micro-batch is "
        "planned in the driver's Python (a Delta cut and every queue's max offset from the broker) and its "
        "rows are pulled by lakemq's Python client in Spark's Python workers, reaching the JVM as Arrow "
        "batches; Spark's Kafka source plans and reads in the JVM with the Java Kafka client.")
BODY = 1024
PRODUCERS, BATCH = 16, 32


async def _fill(client: PeerClient, count: int) -> int:
    """``count`` bodies (rounded up to whole batches) onto TOPIC; returns how many were acked."""
    await client.create_topic(TOPIC)
    handles = [await client.producer(TOPIC) for _ in range(PRODUCERS)]
    per_producer = -(-count // (PRODUCERS * BATCH))
    body = b"x" * BODY

    async def run(index: int) -> None:
        for _ in range(per_producer):
            await handles[index].send_batch([body] * BATCH)

    try:
        await asyncio.gather(*(run(i) for i in range(PRODUCERS)))
    finally:
        for handle in handles:
            await handle.close()
        await client.close()
    return per_producer * PRODUCERS * BATCH


async def _paced(client: PeerClient, rate: int, seconds: float) -> int:
    """``rate`` messages a second onto LATENCY_TOPIC for ``seconds``, each body starting with its
    send time in epoch microseconds; returns how many were acked."""
    handles = [await client.producer(LATENCY_TOPIC) for _ in range(4)]
    total = int(rate * seconds)
    pending: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    try:
        for i in range(total):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            body = f"{time.time_ns() // 1000:016d}".encode().ljust(BODY, b"x")
            task = asyncio.ensure_future(handles[i % len(handles)].send(body))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
    finally:
        for handle in handles:
            await handle.close()
        await client.close()
    return total


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# Spark's durationMs parts of a micro-batch, as the latency run reports their medians.
PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def _phases(progress: list[Any], after_us: int) -> dict[str, float]:
    """Median durationMs per phase, and rows, over the micro-batches that started after ``after_us``
    and read something."""
    kept = [p for p in progress if p["numInputRows"]
            and datetime.fromisoformat(p["timestamp"]).timestamp() * 1_000_000 >= after_us]
    if not kept:
        return {}
    medians = {phase: statistics.median(float(p["durationMs"].get(phase, 0)) for p in kept) for phase in PHASES}
    medians["rows"] = statistics.median(float(p["numInputRows"]) for p in kept)
    medians["batches"] = float(len(kept))
    return medians


def _latency(spark: Any, reader: Callable[[], Any], column: str, client: PeerClient, args: argparse.Namespace,
             checkpoints: Path) -> tuple[list[float], int, int, dict[str, float]]:
    """End-to-end latency (ms) of the rows sent after the warm-up; rows seen, rows sent; and the
    median micro-batch's phases (Spark's durationMs) after the warm-up."""
    from pyspark.sql import functions as F

    asyncio.run(client.create_topic(LATENCY_TOPIC))
    seen: list[tuple[int, float]] = []  # (send time us, latency ms)
    lock = threading.Lock()

    def sink(frame: Any, _batch: int) -> None:
        sent = [int(r[0]) for r in frame.select(F.col(column).substr(1, 16).cast("string")).collect()]
        now_us = time.time_ns() // 1000
        with lock:
            seen.extend((s, (now_us - s) / 1000) for s in sent)

    checkpoint = tempfile.mkdtemp(prefix="latency-", dir=checkpoints)
    query = reader().writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    try:
        first_us = time.time_ns() // 1000
        sent = asyncio.run(_paced(client, args.rate, args.latency_seconds))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and query.isActive:
            with lock:
                if len(seen) >= sent:
                    break
            query.awaitTermination(0.5)  # bounded wait for the sink to catch up
        progress = list(query.recentProgress)
    finally:
        query.stop()
    cutoff = first_us + int(args.latency_warmup * 1_000_000)
    return [ms for s, ms in seen if s >= cutoff], len(seen), sent, _phases(progress, cutoff)


def _query(spark: Any, name: str, reader: Callable[[], Any], column: str, checkpoints: Path) -> tuple[int, float]:
    """Run one AvailableNow query to the end; its rows and seconds."""
    checkpoint = tempfile.mkdtemp(prefix=f"{name}-", dir=checkpoints)
    frame = reader().select(column)
    started = time.monotonic()
    query = (frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.monotonic() - started
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return rows, elapsed


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="backlog per source (default 100,000)")
    parser.add_argument("--max-per-trigger", type=int, default=20_000,
                        help="maxOffsetsPerTrigger of both sources (default 20,000)")
    parser.add_argument("--rate", type=int, default=1000, help="messages/s in the latency run (default 1,000)")
    parser.add_argument("--latency-seconds", type=float, default=40.0,
                        help="how long the latency run's producers send (default 40)")
    parser.add_argument("--latency-warmup", type=float, default=10.0,
                        help="seconds of the latency run left out of the figures (default 10)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "bench/stream_source_bench.py", *(sys.argv[1:] if argv is None else argv)])
    ensure_groups("spark-kafka")
    kafka_jars = sorted(str(p) for p in (BUILD / "spark-kafka" / "lib").glob("*.jar"))
    load_before = os.getloadavg()[0]
    with LakemqAsyncPeer() as lakemq, KafkaPeer() as kafka, tempfile.TemporaryDirectory() as scratch:
        peers: dict[str, Peer] = {"lakemq": lakemq, "kafka": kafka}
        backlog = {name: asyncio.run(_fill(peer.client(), args.messages)) for name, peer in peers.items()}
        print(f"backlog: {backlog}", flush=True)
        from lakemq.jobs.session import build_session
        from lakemq.jobs.sources import register_sources

        spark = build_session(master="local[2]", app_name="lakemq-stream-source-bench", ui_enabled=False,
                              conf={"spark.jars": ",".join(kafka_jars), "spark.sql.shuffle.partitions": "2"})
        register_sources(spark)
        limit = str(args.max_per_trigger)
        lake = Path(scratch, "lake")  # empty: the whole backlog is the broker's
        assert isinstance(lakemq, LakemqAsyncPeer) and isinstance(kafka, KafkaPeer)  # __enter__ says Peer
        def lakemq_reader(schema: str | None) -> Callable[[], Any]:
            def load() -> Any:
                reader = spark.readStream.format("lakemq")
                reader = reader if schema is None else reader.schema(schema)
                return (reader.option("namesrv", lakemq.namesrv_addr).option("lake", str(lake)).option("topic", TOPIC)
                        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", limit).load())
            return load

        # name -> (the broker it reads, the query's reader, the column it selects)
        readers: dict[str, tuple[str, Callable[[], Any], str]] = {
            "lakemq": ("lakemq", lakemq_reader(None), "body"),
            "lakemq-schema": ("lakemq", lakemq_reader("body binary"), "body"),
            "kafka": ("kafka", lambda: spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
                      .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                      .option("maxOffsetsPerTrigger", limit).load(), "value"),
        }
        results: dict[str, list[tuple[int, float]]] = {}
        for attempt in ("warm-up", "measured"):
            for name, (_, reader, column) in readers.items():
                rows, seconds = _query(spark, name, reader, column, Path(scratch))
                results.setdefault(name, []).append((rows, seconds))
                print(f"{name} {attempt}: {rows:,} rows in {seconds:.1f} s = {rows / seconds:,.0f} rows/s", flush=True)
        latency: dict[str, tuple[list[float], int, int, dict[str, float]]] = {}
        live: dict[str, Callable[[], Any]] = {
            "lakemq": lambda: spark.readStream.format("lakemq").option("namesrv", lakemq.namesrv_addr)
            .option("lake", str(lake)).option("topic", LATENCY_TOPIC).option("startingOffsets", "earliest").load(),
            "kafka": lambda: spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", LATENCY_TOPIC).option("startingOffsets", "earliest").load(),
        }
        for name, reader in live.items():
            latency[name] = _latency(spark, reader, readers[name][2], peers[name].client(), args, Path(scratch))
            kept, seen, sent, phases = latency[name]
            print(f"{name} latency: {seen:,} of {sent:,} rows; p50 {_percentile(kept, 0.5):,.0f} ms, "
                  f"p99 {_percentile(kept, 0.99):,.0f} ms; median micro-batch {phases}", flush=True)
        spark.stop()
    load_after = os.getloadavg()[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    expected = {name: backlog[peer] for name, (peer, _, _) in readers.items()}
    section = _render(results, expected, latency, args, command, when, (load_before, load_after))
    if args.no_write:
        print(section)
    else:
        replace_section(section)
        print("wrote BENCHMARKS.md")
    complete = all(rows == expected[name] for name, runs in results.items() for rows, _ in runs)
    return 0 if complete and all(seen == sent for _, seen, sent, _ in latency.values()) else 1


def _render(results: dict[str, list[tuple[int, float]]], backlog: dict[str, int],
            latency: dict[str, tuple[list[float], int, int, dict[str, float]]], args: argparse.Namespace,
            command: str, when: str, load: tuple[float, float]) -> str:
    titles = {"lakemq": '`spark.readStream.format("lakemq")`, every column (lakemq broker, ASYNC_FLUSH; hot backlog)',
              "lakemq-schema": '`spark.readStream.format("lakemq").schema("body binary")`, the body column only',
              "kafka": "Spark's Kafka source, spark-sql-kafka-0-10 4.2.0 (Apache Kafka 4.4 KRaft, acks=all)"}
    lines = [
        "## Streaming sources (bench/stream_source_bench.py)",
        "",
        (f"Run {when}, on 2 cores shared with other work (load average {load[0]:.1f} before, {load[1]:.1f} "
         "after): treat the figures as a comparison made side by side, not as either source's ceiling."),
        "",
        "```",
        command,
        "```",
        "",
        (f"A backlog of {max(backlog.values()):,} 1 KiB bodies on 8 queues (partitions) in each broker; one Spark "
         f"session (local[2]); per source a query from the earliest offset, Trigger.AvailableNow, "
         f"maxOffsetsPerTrigger {args.max_per_trigger:,}, the body column into the noop sink. The first "
         "pass warms the code paths; the second is measured (rows / wall time from start() to the last "
         "micro-batch's end). The Python Data Source API prunes no columns, so the lakemq source yields "
        "all 21 of messages' columns, strings and the properties map included, and Spark converts each to "
        "its rows, unless the reader is given a schema naming fewer: the second lakemq row names the body "
        "alone. Kafka's source always yields its 7 columns."),
        "",
        "| source | rows | warm-up rows/s | measured s | measured rows/s | vs Kafka |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    kafka_rows, kafka_s = results["kafka"][1]
    for name, runs in results.items():
        (warm_rows, warm_s), (rows, seconds) = runs
        lines.append(f"| {titles[name]} | {rows:,} of {backlog[name]:,} | {warm_rows / warm_s:,.0f} | "
                     f"{seconds:.1f} | {rows / seconds:,.0f} | {rows / seconds / (kafka_rows / kafka_s):.2f}x |")
    lines += [
        "",
        (f"Latency: per source a query with the default trigger from the earliest offset of an empty topic into "
         f"a foreachBatch sink while 4 producers send {args.rate:,} msg/s in all for {args.latency_seconds:.0f} s "
         f"(same 1 KiB bodies, each starting with its send time); per row, the time its micro-batch reached the "
         f"sink minus the send time, leaving out the first {args.latency_warmup:.0f} s of messages."),
        "",
        "| source | rows seen of sent | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (kept, seen, sent, _) in latency.items():
        figures = (f"{_percentile(kept, 0.5):,.0f} | {_percentile(kept, 0.99):,.0f} | {max(kept):,.0f}" if kept
                   else "- | - | -")
        lines.append(f"| {titles[name]} | {seen:,} of {sent:,} | {figures} |")
    lines += [
        "",
        ("The latency run's median micro-batch after the warm-up (Spark's durationMs, ms; rows read; "
         "how many micro-batches):"),
        "",
        "| source | " + " | ".join(PHASES) + " | rows | batches |",
        "|---|" + "---:|" * (len(PHASES) + 2),
    ]
    for name, (_, _, _, phases) in latency.items():
        cells = [f"{phases[k]:,.0f}" if k in phases else "-" for k in (*PHASES, "rows", "batches")]
        lines.append(f"| {titles[name]} | " + " | ".join(cells) + " |")
    lines += ["", _HOW]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
