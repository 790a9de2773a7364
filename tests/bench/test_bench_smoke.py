"""Short runs of the broker and client benchmarks (not timed: the figures are only checked to be
there and sane), so a change that breaks a benchmark fails here, not in the next measuring run;
and lakemq's peer in the peer harness, consumed both ways (push consumer, pull)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers.lakemq_peer import LakemqAsyncPeer
from bench.peers.process import PeerUnavailable, ensure_binary

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 240) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _figures(out: str, phase: str) -> list[float]:
    line = next(line for line in out.splitlines() if line.startswith(f"{phase}:"))
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", line.split(":", 1)[1])]


def test_hot_path_bench_measures_sends_pulls_and_deliveries() -> None:
    out = _run("bench/hot_path_bench.py", "--sends", "400", "--pulls", "40", "--deliveries", "40")
    for phase in ("send", "pull", "deliver"):
        count, *cpu = _figures(out, phase)
        assert count > 0 and all(c > 0 for c in cpu), out


def test_client_bench_runs_every_phase() -> None:
    out = _run("bench/client_bench.py", "--messages", "640", "--rate", "500", "--seconds", "1")
    for phase in ("send", "send_16", "sync_send", "push", "pull", "pull_serial", "latency"):
        messages, rate, client_cpu, _broker_cpu, *_ = _figures(out, phase)
        assert messages >= 500 and rate > 0 and client_cpu > 0, out


def test_broker_bench_runs_a_phase() -> None:
    out = _run("bench/broker_bench.py", "--only", "sync_1", "--duration", "1")
    rate, broker_cpu, client_cpu, errors = _figures(out, "sync_1")[:4]
    assert rate > 0 and broker_cpu > 0 and client_cpu > 0 and errors == 0, out


def test_ceiling_bench_redis_part_compares_both_servers() -> None:
    pytest.importorskip("hiredis", reason="the bench extra (redis-py with hiredis) is not installed")
    try:
        ensure_binary("redis-server", "redis-server")
    except PeerUnavailable as exc:
        pytest.skip(f"redis-server cannot be installed here: {exc}")
    out = _run("bench/ceiling_bench.py", "--parts", "redis", "--duration", "0.5", "--rounds", "1")
    rows = [line for line in out.splitlines() if line.startswith("| appendfsync")]
    assert len(rows) == 4, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        redis_rate, null_rate = (float(cells[i].replace(",", "")) for i in (2, 4))
        assert redis_rate > 0 and null_rate > 0 and float(cells[6]) > 0, row


def test_lakemq_peer_consumes_with_its_push_consumer_and_pulls() -> None:
    with LakemqAsyncPeer() as peer:
        async def round_trip() -> tuple[list[bytes], list[bytes]]:
            client = peer.client()
            await client.create_topic("smoke")
            producer = await client.producer("smoke")
            await producer.send(b"one")
            await producer.send_batch([b"two", b"three"])
            await producer.close()
            pushed: list[bytes] = []
            assert await client.consume("smoke", "g1", 3, pushed.append, timeout=30) == 3
            pulled: list[bytes] = []
            assert await client.consume_pull("smoke", 3, pulled.append, timeout=30) == 3
            await client.close()
            return pushed, pulled

        pushed, pulled = asyncio.run(round_trip())
    assert sorted(pushed) == sorted(pulled) == [b"one", b"three", b"two"]


def test_lakemq_peer_starts_on_another_port_when_its_port_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port found free but bound by someone else before the server binds it: the server
    exits with EADDRINUSE, and the peer starts it on another port."""
    from bench.peers import lakemq_peer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = lakemq_peer.free_port
        monkeypatch.setattr(lakemq_peer, "free_port", lambda: next(ports, None) or real())
        with LakemqAsyncPeer() as peer:
            # The namesrv that lost the port is gone; the one on another port serves the broker.
            assert [p.name for p in peer.processes] == ["namesrv", "broker"]
            assert peer.namesrv_addr != f"127.0.0.1:{taken.getsockname()[1]}"
            assert all(p.alive() for p in peer.processes)


def test_timer_bench_measures_lateness() -> None:
    out = _run("bench/timer_bench.py", "--timers", "300", "--window", "2", "--lead", "4")
    _, p50, _, p99, worst, early, duplicates = _figures(out, "lateness")  # "p50 N ms, p99 N ms, ..."
    assert 0 <= p50 <= p99 <= worst < 1000 and early == 0 and duplicates == 0, out
