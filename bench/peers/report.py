"""The peers' results as a Markdown section (with ratios to lakemq) and a latency plot."""

from __future__ import annotations

import json
import math
import os
import platform
import re
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from bench.peers.workload import Plan, PeerResult

__all__ = ["render_section", "replace_section", "plot_latency", "write_json", "SECTION"]

SECTION = "## Peers"
LAKEMQ_REFERENCE = {"ASYNC_FLUSH": "lakemq-async", "SYNC_FLUSH": "lakemq-sync"}
CLIENTS = ("redis", "nats-py", "aio-pika")


def _num(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _ratio(value: float, reference: float | None) -> str:
    if reference is None or not reference or math.isnan(value) or math.isnan(reference):
        return ""
    return f" ({value / reference:.2f}x)"


def _metrics(result: PeerResult) -> dict[str, float]:
    nan = float("nan")
    by_shape = {(p.producers, p.batch): p.rate for p in result.produce}
    metrics = {
        "p1": by_shape.get((1, 1), nan),
        "p16": by_shape.get((16, 1), nan),
        "p16b": by_shape.get((16, 32), nan),
        "consume": result.consume.rate if result.consume else nan,
        "consume_mb": result.consume.mb_per_s if result.consume else nan,
    }
    pct = result.latency.percentiles_ms if result.latency else {}
    for name in ("p50", "p90", "p99", "p99.9"):
        metrics[f"lat_{name}"] = pct.get(name, nan)
    return metrics


def render_section(results: list[PeerResult], plan: Plan, command: str, when: str,
                   plot_path: str | None) -> str:
    """The whole "## Peers" section: command, conditions, table, notes, failures."""
    metrics = {r.key: _metrics(r) for r in results if r.error is None}
    lines = [
        SECTION, "",
        f"Measured {when} with:", "", "```", command, "```", "",
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; clients {', '.join(_client_versions())}. "
        "The servers, the client process and any other load share these cores, so treat "
        "small differences as noise.", "",
        f"Workload: {plan.body_size}-byte bodies; producers are asyncio tasks in one client "
        "process, each with its own connection, every send waiting for the peer's durable ack "
        f"(the same for every peer, so the client's single core bounds everyone alike); "
        f"{plan.phase_seconds:g} s per produce phase; one consumer group reads all that was "
        f"produced (bounded by {plan.consume_timeout:g} s); latency is end to end (send "
        f"scheduled -> consumer callback) at {plan.latency_rate:,} msg/s for "
        f"{plan.latency_seconds:g} s, open loop, from the scheduled send time.", "",
        *([f"**Smoke run** (`--quick`, {plan.phase_seconds:g} s phases): too short for "
           "stable figures; run without `--quick` for the numbers to quote.", ""]
          if plan.smoke else []),
        "Ratios in brackets are peer / lakemq with the comparable flush mode (the `vs` column):"
        " above 1 the peer has more throughput or more latency.", "",
        "| peer | vs | 1 producer msg/s | 16 producers msg/s | 16 x batch 32 msg/s "
        "| consume msg/s (MB/s) | p50 ms | p99 ms | p99.9 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        if result.error is not None:
            continue
        m = metrics[result.key]
        ref_key = LAKEMQ_REFERENCE[result.durability]
        ref = metrics.get(ref_key) if ref_key != result.key else None
        r = (lambda name: ref.get(name) if ref else None)  # noqa: E731 - local shorthand
        vs = result.durability if ref_key != result.key else "(reference)"
        lines.append(
            f"| {result.title} | {vs} "
            f"| {_num(m['p1'])}{_ratio(m['p1'], r('p1'))} "
            f"| {_num(m['p16'])}{_ratio(m['p16'], r('p16'))} "
            f"| {_num(m['p16b'])}{_ratio(m['p16b'], r('p16b'))} "
            f"| {_num(m['consume'])} ({m['consume_mb']:.1f}){_ratio(m['consume'], r('consume'))} "
            f"| {_ms(m['lat_p50'])}{_ratio(m['lat_p50'], r('lat_p50'))} "
            f"| {_ms(m['lat_p99'])}{_ratio(m['lat_p99'], r('lat_p99'))} "
            f"| {_ms(m['lat_p99.9'])}{_ratio(m['lat_p99.9'], r('lat_p99.9'))} |")
    lines += ["", "Durability settings and how a batch of 32 is sent:", ""]
    for result in results:
        if result.error is None:
            lines.append(f"- **{result.title}**: {result.settings}; batch: {result.batch_note}.")
    incomplete = [r for r in results if r.error is None and (
        (r.consume and r.consume.messages < r.consume.expected)
        or (r.latency and r.latency.received < r.latency.sent))]
    if incomplete:
        lines += ["", "Incomplete reads within the time bounds:", ""]
        for r in incomplete:
            parts = []
            if r.consume and r.consume.messages < r.consume.expected:
                parts.append(f"consumed {r.consume.messages:,} of {r.consume.expected:,}")
            if r.latency and r.latency.received < r.latency.sent:
                parts.append(f"latency run received {r.latency.received:,} of {r.latency.sent:,}")
            lines.append(f"- {r.title}: {'; '.join(parts)}.")
    failed = [r for r in results if r.error is not None]
    if failed:
        lines += ["", "Not measured:", ""]
        lines += [f"- {r.title}: {r.error}" for r in failed]
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


def replace_section(document: Path, section: str) -> None:
    """Put ``section`` in place of the document's "## Peers" section (up to the next "## "
    heading), appending it when absent and creating the document when missing."""
    text = document.read_text() if document.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\s*$.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    document.write_text(text.rstrip("\n") + "\n")


def plot_latency(results: list[PeerResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["p50", "p90", "p99", "p99.9"]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for result in results:
        if result.error is not None or result.latency is None:
            continue
        values = [result.latency.percentiles_ms.get(n, float("nan")) for n in names]
        lakemq = result.key.startswith("lakemq")
        ax.plot(names, values, marker="o", linewidth=2.6 if lakemq else 1.4,
                linestyle="-" if lakemq else "--", label=result.title)
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency, ms (log scale)")
    ax.set_xlabel("percentile")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def write_json(results: list[PeerResult], plan: Plan, command: str, path: Path) -> None:
    payload = {"command": command, "plan": asdict(plan), "results": [asdict(r) for r in results]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
