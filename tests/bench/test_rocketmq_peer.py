"""Apache RocketMQ's own broker as a benchmark peer (bench/peers/rocketmq_peer.py), driven by
lakemq's Python client, and the Java bench driver (bench/peers/java_bench.py) filling a peer's
results: each round-trips messages, reads the broker's CPU time, and leaves no process behind."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest

from bench.peers.java_bench import run_java_workload
from bench.peers.lakemq_peer import LakemqAsyncPeer
from bench.peers.rocketmq_peer import RocketMQAsyncPeer
from bench.peers.workload import QUICK, PeerResult
from tests.bench.peer_checks import gone, round_trip

pytestmark = [pytest.mark.jvm, pytest.mark.slow, pytest.mark.timeout(300)]


def test_rocketmq_peer_round_trip_cpu_and_clean_stop() -> None:
    with RocketMQAsyncPeer() as peer:
        before = peer.cpu_seconds()
        assert sorted(asyncio.run(round_trip(peer, timeout=30))) == [b"one", b"three", b"two"]
        assert peer.cpu_seconds() > before > 0  # the broker JVM's own CPU time
        pids = [p.pid for p in peer.processes]
    assert all(gone(pid) for pid in pids)


def test_java_bench_driver_fills_a_peer_result() -> None:
    plan = dataclasses.replace(QUICK, phase_seconds=0.5, latency_rates=(200,), latency_seconds=1.0,
                               warmup_seconds=0.5, producer_counts=(1, 4), batch_size=8)
    with LakemqAsyncPeer() as peer:
        result = PeerResult(peer.key, peer.title, peer.durability.value, peer.settings, peer.batch_note, "java")
        run_java_workload(peer, result, plan, log=print)
    assert [(p.producers, p.batch) for p in result.produce] == [(1, 1), (4, 1), (4, 8)]
    assert all(p.messages > 0 and p.cpu_seconds > 0 for p in result.produce)
    assert result.consume is not None and result.consume.messages == sum(p.messages for p in result.produce)
    [latency] = result.latency
    assert latency.received == latency.sent == 200 and not math.isnan(latency.percentiles_ms["p99"])
