"""Apache RocketMQ's own broker as a benchmark peer (bench/peers/rocketmq_peer.py), driven by
lakemq's Python client, and the Java bench driver (bench/peers/java_bench.py) filling a peer's
results: each round-trips messages, reads the broker's CPU time, and leaves no process behind."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os

import pytest

from bench.peers.java_bench import run_java_workload
from bench.peers.lakemq_peer import LakemqAsyncPeer
from bench.peers.rocketmq_peer import RocketMQAsyncPeer
from bench.peers.workload import QUICK, PeerResult

pytestmark = [pytest.mark.jvm, pytest.mark.slow, pytest.mark.timeout(300)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] == "Z"


async def _round_trip(peer: RocketMQAsyncPeer) -> list[bytes]:
    client = peer.client()
    await client.create_topic("harness")
    producer = await client.producer("harness")
    await producer.send(b"one")
    await producer.send_batch([b"two", b"three"])
    await producer.close()
    bodies: list[bytes] = []
    assert await client.consume("harness", "g1", 3, bodies.append, timeout=30) == 3
    await client.close()
    return bodies


def test_rocketmq_peer_round_trip_cpu_and_clean_stop() -> None:
    with RocketMQAsyncPeer() as peer:
        before = peer.cpu_seconds()
        assert sorted(asyncio.run(_round_trip(peer))) == [b"one", b"three", b"two"]
        assert peer.cpu_seconds() > before > 0  # the broker JVM's own CPU time
        pids = [p.pid for p in peer.processes]
    assert all(_gone(pid) for pid in pids)


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
