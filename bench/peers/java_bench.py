"""The workload run by Apache RocketMQ's Java client (the Java bench driver, tests/compat/java
Bench) against a RocketMQ-protocol peer; its JSON lines become the same PeerResult as the Python
workload's (bench/peers/workload.py), CPU per message included."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.jvm import JvmUnavailable, java_command
from bench.peers.base import Peer
from bench.peers.process import PeerUnavailable
from bench.peers.workload import (
    ConsumeResult,
    LatencyResult,
    PeerResult,
    Plan,
    ProduceResult,
    describe_consume,
    describe_latency,
    describe_produce,
)

__all__ = ["run_java_workload"]

BENCH_MAIN = "org.lakemq.compat.Bench"


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def run_java_workload(peer: Peer, result: PeerResult, plan: Plan, log: Callable[[str], None]) -> None:
    namesrv = getattr(peer, "namesrv_addr", "")
    broker = peer.broker or peer.processes[-1]
    assert peer.workdir is not None and namesrv, f"{peer.key} has no NameServer address"
    args = {"namesrv": namesrv, "body-size": plan.body_size, "phase-seconds": plan.phase_seconds,
            "producers": max(plan.producer_counts), "batch": plan.batch_size,
            "consume-timeout": plan.consume_timeout, "rates": ",".join(map(str, plan.latency_rates)),
            "latency-seconds": plan.latency_seconds, "drain-timeout": plan.drain_timeout,
            "max-in-flight": plan.max_in_flight, "cpu-pids": broker.sid, "queues": 8,
            "warmup-seconds": plan.warmup_seconds}
    try:
        argv = java_command(BENCH_MAIN, [x for k, v in args.items() for x in (f"--{k}", str(v))], heap="1g",
                            options=(f"-Duser.home={peer.workdir}",
                                     f"-Drocketmq.client.logRoot={Path(peer.workdir) / 'client-logs'}"))
    except JvmUnavailable as exc:
        raise PeerUnavailable(str(exc)) from exc
    budget = 3 * plan.phase_seconds + plan.consume_timeout + len(plan.latency_rates) * (
        plan.latency_seconds + plan.drain_timeout + 60) + 120
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            phase = json.loads(line)
            _record(phase, result, log)
        try:
            proc.wait(budget)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"the Java bench driver exited {proc.returncode}: {err.strip().splitlines()[-1:]}")


def _record(phase: dict[str, Any], result: PeerResult, log: Callable[[str], None]) -> None:
    kind = phase.get("kind")
    if kind == "produce":
        produced = ProduceResult(phase["producers"], phase["batch"], phase["messages"], phase["seconds"],
                                 phase["cpu_seconds"])
        result.produce.append(produced)
        log(describe_produce(produced))
    elif kind == "consume":
        result.consume = ConsumeResult(phase["expected"], phase["messages"], phase["seconds"], phase["mbytes"],
                                       phase["cpu_seconds"])
        log(describe_consume(result.consume))
    elif kind == "latency":
        percentiles = {name: _nan(value) for name, value in phase["percentiles_ms"].items()}
        measured = LatencyResult(phase["rate"], phase["sent"], phase["received"], phase["send_seconds"], percentiles,
                                 phase["failed_sends"], phase.get("first_error"), phase["held_back"],
                                 phase["cpu_seconds"])
        result.latency.append(measured)
        log(describe_latency(measured))
    elif phase.get("phase") == "error":
        raise RuntimeError(f"the Java bench driver failed: {phase.get('message')}")
