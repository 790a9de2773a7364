"""The peers' results as a Markdown section (with ratios to lakemq) and a latency plot."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from bench.peers.workload import LatencyResult, PeerResult, Plan

__all__ = ["SECTION", "plot_latency", "render_section", "write_json"]

SECTION = "## Peers"
# How each peer is driven, and why: written into every run's section.
CLIENT_CHOICES = """Peers and their clients, each as its users run it:

- **lakemq** and **Apache RocketMQ** (its own NameServer and broker 4.9.7 from the Maven jars, G1 as
  in its runbroker.sh, 2 GiB heap, 1 GiB CommitLog files, the same broker.conf keys) are each
  driven twice: by lakemq's Python client (the same client for both brokers, so the comparison
  is the brokers'), and by Apache RocketMQ's Java client 4.9.8 (what RocketMQ users run; the
  Java bench driver in tests/compat/java). A Java row is compared with lakemq's Java row.
- **redis** Streams: redis-py with hiredis (its C reply parser); XADD, pipelines of 32 for
  batches, one consumer group reading 256 entries per XREADGROUP and acknowledging each read
  with one XACK.
- **NATS** JetStream: nats-py, the NATS Python client; a durable pull consumer (JetStream's
  consumer group) fetching 512 at a time, AckAll.
- **RabbitMQ** streams: rstream, the RabbitMQ team's client of the stream protocol (what
  stream users run for throughput, rather than AMQP 0-9-1), every send
  confirmed, a batch one send_batch; read from the first offset with server-side offset
  tracking (a stream's consumer group). Quorum queues: aio-pika, the usual asyncio AMQP 0-9-1
  client, persistent messages with publisher confirms (32 in flight for a batch).
- **Apache Kafka** 4.4 (one KRaft node, broker and controller in one process, from the Maven
  jars; kafka-run-class.sh's G1 settings, 1 GiB heap, 8 partitions per topic): confluent-kafka
  (librdkafka), `acks=all` with the idempotent producer, `linger.ms=0` (each send waits for its
  report, so lingering only adds its wait), `batch.size` 1 MiB, no compression; a batch is 32
  produce() calls and one wait. One consumer group from the earliest offset, auto-commit. Its
  default flush (no fsync on the write path) is compared with ASYNC_FLUSH,
  `log.flush.interval.messages=1` (fsync before the ack) with SYNC_FLUSH."""
# The lakemq row each peer is compared with: same flush mode, same client.
LAKEMQ_REFERENCE = {("ASYNC_FLUSH", "python"): "lakemq-async", ("SYNC_FLUSH", "python"): "lakemq-sync",
                    ("ASYNC_FLUSH", "java"): "lakemq-async-java", ("SYNC_FLUSH", "java"): "lakemq-sync-java"}
CLIENTS = ("redis", "hiredis", "nats-py", "aio-pika", "rstream", "confluent-kafka")
PERCENTILES = ("p50", "p90", "p99", "p99.9")


def _num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _ratio(value: float, reference: float | None) -> str:
    if reference is None or not reference or math.isnan(value) or math.isnan(reference):
        return ""
    return f" ({value / reference:.2f}x)"


def _throughput(result: PeerResult) -> dict[str, float]:
    nan = float("nan")
    by_shape = {(p.producers, p.batch): p.rate for p in result.produce}
    return {
        "p1": by_shape.get((1, 1), nan),
        "p16": by_shape.get((16, 1), nan),
        "p16b": by_shape.get((16, 32), nan),
        "consume": result.consume.rate if result.consume else nan,
        "pull": result.pull.rate if result.pull else nan,
    }


def _latency_at(result: PeerResult | None, rate: int) -> LatencyResult | None:
    if result is None:
        return None
    return next((lat for lat in result.latency if lat.rate == rate), None)


def _reference_key(result: PeerResult) -> str:
    return LAKEMQ_REFERENCE[(result.durability, result.client)]


def _reference(result: PeerResult, by_key: dict[str, PeerResult]) -> PeerResult | None:
    """The lakemq row this peer is compared with; None for the lakemq rows themselves."""
    key = _reference_key(result)
    return None if key == result.key else by_key.get(key)


def _vs(result: PeerResult) -> str:
    if _reference_key(result) == result.key:
        return "(reference)"
    return result.durability + (" (Java)" if result.client == "java" else "")


def _cpu(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def _cpu_table(measured: list[PeerResult], rates: tuple[int, ...]) -> list[str]:
    """The broker's CPU time per message (utime + stime of its processes from /proc)."""
    lines = [
        "| peer | 1 producer | 16 producers | 16 x batch 32 | consume | pull | "
        + " | ".join(f"latency {rate:,}/s" for rate in rates) + " |",
        "|---|" + "---:|" * (5 + len(rates)),
    ]
    for result in measured:
        by_shape = {(p.producers, p.batch): p.cpu_us_per_msg for p in result.produce}
        cells = [by_shape.get(shape, float("nan")) for shape in ((1, 1), (16, 1), (16, 32))]
        cells.append(result.consume.cpu_us_per_msg if result.consume else float("nan"))
        cells.append(result.pull.cpu_us_per_msg if result.pull else float("nan"))
        cells += [lat.cpu_us_per_msg if (lat := _latency_at(result, rate)) else float("nan") for rate in rates]
        lines.append(f"| {result.title} | " + " | ".join(_cpu(c) for c in cells) + " |")
    return lines


def _throughput_table(measured: list[PeerResult], by_key: dict[str, PeerResult]) -> list[str]:
    lines = [
        ("| peer | vs | 1 producer msg/s | 16 producers msg/s | 16 x batch 32 msg/s "
        "| consume msg/s (MB/s) | pull msg/s |"),
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for result in measured:
        m = _throughput(result)
        ref = _reference(result, by_key)
        r = _throughput(ref) if ref else {}
        mb = result.consume.mb_per_s if result.consume else float("nan")
        lines.append(
            f"| {result.title} | {_vs(result)} "
            + "".join(f"| {_num(m[k])}{_ratio(m[k], r.get(k))} " for k in ("p1", "p16", "p16b"))
            + f"| {_num(m['consume'])} ({mb:.1f}){_ratio(m['consume'], r.get('consume'))} "
            + f"| {_num(m['pull'])}{_ratio(m['pull'], r.get('pull'))} |")
    return lines


def _latency_table(measured: list[PeerResult], by_key: dict[str, PeerResult],
                   rates: tuple[int, ...]) -> list[str]:
    lines = [
        "| peer | vs | rate msg/s | achieved msg/s | received | p50 ms | p90 ms | p99 ms | p99.9 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate in rates:
        for result in measured:
            lat = _latency_at(result, rate)
            if lat is None:
                continue
            ref = _latency_at(_reference(result, by_key), rate)
            cells = []
            for name in PERCENTILES:
                value = lat.percentiles_ms.get(name, float("nan"))
                ratio = _ratio(value, ref.percentiles_ms.get(name)) if ref else ""
                cells.append(f"{_ms(value)}{ratio}")
            saturated = " (saturated)" if lat.saturated else ""
            failed = f" ({lat.failed_sends:,} sends failed)" if lat.failed_sends else ""
            lines.append(
                f"| {result.title} | {_vs(result)} | {rate:,} | {lat.achieved_rate:,.0f}{saturated} "
                f"| {lat.received:,}/{lat.sent:,}{failed} | " + " | ".join(cells) + " |")
    return lines


# How the run's event loop is described in the Workload paragraph.
_LOOP_NOTES = {
    "uvloop": ("uvloop, on which every asyncio client here gains overall, redis-py the most (BENCHMARKS.md, "
               "\"The peers' event loop\")"),
    "asyncio": "asyncio's own event loop (`--loop asyncio`)",
}


def render_section(results: list[PeerResult], plan: Plan, command: str, when: str,
                   plot_path: str | None, loop: str) -> str:
    """The whole "## Peers" section: command, conditions, tables, notes, failures."""
    measured = [r for r in results if r.error is None]
    by_key = {r.key: r for r in measured}
    rates = ", ".join(f"{rate:,}" for rate in plan.latency_rates)
    lines = [
        SECTION, "",
        f"Measured {when} with:", "", "```", command, "```", "",
        (f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; clients {', '.join(_client_versions())}, lakemq.client, and Apache "
        "RocketMQ's Java client 4.9.8 for the rows marked (Java client). "
        "The servers, the client process and any other load share these cores, so treat "
        "small differences as noise."), "",
        (f"Workload: {plan.body_size}-byte bodies. Producers are asyncio tasks in one client "
        f"process on {_LOOP_NOTES[loop]}, each with its own connection, every send waiting for "
        "the peer's durable ack; "
        "the same for every peer, so one client core bounds everyone alike (separate processes "
        "would take cores from the servers on this machine). With the Java client (rows marked so) "
        "the same phases run in one JVM, each producer a thread with its own client instance "
        "(bench/peers/java_bench.py). "
        f"Every peer first takes {plan.warmup_seconds:g} s of unmeasured sends (JIT and caches warm). "
        f"{plan.phase_seconds:g} s per produce phase; then one consumer group reads everything "
        f"produced (bounded by {plan.consume_timeout:g} s; lakemq's Python client: a PushConsumer on its "
        "default settings, a plain listener run in its worker threads), and where the client also "
        "pulls, a pull consumer reads it all again, 32 per pull, every queue in its own task (the pull "
        "column). Latency is end to "
        f"end (scheduled send -> consumer callback) at {rates} msg/s for {plan.latency_seconds:g} s each, open "
        f"loop with at most {plan.max_in_flight} sends in flight, measured from the scheduled "
        "send time. A peer is marked *saturated* when a send had to wait for a free in-flight "
        "slot or the achieved rate fell under 95% of the schedule: its latency is then mostly "
        "queueing."), "",
        *([(f"**Smoke run** (`--quick`, {plan.phase_seconds:g} s phases): too short for stable "
           "figures; run without `--quick` for numbers to quote."), ""] if plan.smoke else []),
        CLIENT_CHOICES, "",
        ("Ratios in brackets are peer / lakemq with the comparable flush mode and the same client (the"
        " `vs` column): above 1 the peer has more throughput, or more latency."), "",
        "### Throughput", "",
        *_throughput_table(measured, by_key), "",
        "### End-to-end latency", "",
        *_latency_table(measured, by_key, plan.latency_rates), "",
        "### Broker CPU per message (microseconds)", "",
        ("CPU time (user + system, /proc/PID/stat) of the broker's processes during each phase, divided by "
        "the messages of the phase: what the server spent, whoever drove it."), "",
        *_cpu_table(measured, plan.latency_rates), "",
        "Durability settings and how a batch of 32 is sent:", "",
    ]
    lines += [f"- **{r.title}**: {r.settings}; batch: {r.batch_note}." for r in measured]
    short = [r for r in measured if r.consume and r.consume.messages < r.consume.expected]
    if short:
        lines += ["", "Consumers that did not read everything within the bound:", ""]
        lines += [f"- {r.title}: {r.consume.messages:,} of {r.consume.expected:,}." for r in short
                  if r.consume]
    errors = sorted({lat.first_error for r in measured for lat in r.latency if lat.first_error})
    if errors:
        lines += ["", "Errors seen by failed sends in the latency runs:", ""]
        lines += [f"- `{error}`" for error in errors]
    failed = [r for r in results if r.error is not None]
    if failed:
        lines += ["", "Not measured:", ""]
        lines += [f"- {r.title}: {r.error.splitlines()[0]}" for r in failed if r.error]
    if plot_path:
        lines += ["", f"![end-to-end latency percentiles]({plot_path})"]
    return "\n".join(lines) + "\n"


def _client_versions() -> list[str]:
    found = []
    for name in CLIENTS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return found


def plot_latency(results: list[PeerResult], plan: Plan, path: Path, title: str) -> None:
    """One panel per rate: percentiles on x, milliseconds on a log y axis, a line per peer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = plan.latency_rates
    fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 5), dpi=110, sharey=True,
                             squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for index, result in enumerate(r for r in results if r.error is None):
            lat = _latency_at(result, rate)
            if lat is None:
                continue
            values = [lat.percentiles_ms.get(n, float("nan")) for n in PERCENTILES]
            lakemq = result.key.startswith("lakemq")
            label = result.title + (" (saturated)" if lat.saturated else "")
            ax.plot(PERCENTILES, values, marker="o", color=f"C{index}", label=label,
                    linewidth=2.6 if lakemq else 1.4, linestyle="-" if lakemq else "--")
        ax.set_yscale("log")
        ax.set_title(f"{rate:,} msg/s scheduled")
        ax.set_xlabel("percentile")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("end-to-end latency, ms (log scale)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write_json(results: list[PeerResult], plan: Plan, command: str, path: Path) -> None:
    payload = {"command": command, "plan": asdict(plan), "results": [asdict(r) for r in results]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
