"""The peer benchmark harness starts a real redis-server, round-trips messages through it, and
leaves no process or directory behind, also when the benchmark fails half-way."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is a top-level folder, not part of the installed package
    sys.path.insert(0, str(ROOT))

from bench.peers.process import PeerUnavailable, session_pids
from bench.peers.redis_peer import RedisEverysecPeer
from tests.bench.peer_checks import gone, round_trip


def _started_redis() -> RedisEverysecPeer:
    peer = RedisEverysecPeer()
    try:
        peer.__enter__()
    except PeerUnavailable as exc:
        pytest.skip(f"redis-server cannot be installed or started here: {exc}")
    return peer


def test_redis_round_trip_and_clean_stop() -> None:
    pytest.importorskip("redis", reason="redis-py is not installed (the bench extra)")
    peer = _started_redis()
    workdir = peer.workdir
    assert workdir is not None
    sessions = [(proc.sid, proc.pid) for proc in peer.processes]
    try:
        assert asyncio.run(round_trip(peer, timeout=10)) == [b"one", b"two", b"three"]
        assert (workdir / "appendonlydir").is_dir()  # the AOF is on, in the private dir
    finally:
        peer.__exit__(None, None, None)
    assert sessions
    for sid, pid in sessions:
        assert session_pids(sid) == []
        assert gone(pid)
    assert not workdir.exists()


def test_failure_inside_the_run_still_stops_the_server() -> None:
    pytest.importorskip("redis", reason="redis-py is not installed (the bench extra)")
    peer = RedisEverysecPeer()
    sessions: list[int] = []
    with pytest.raises(RuntimeError, match="benchmark broke"):
        try:
            with peer:
                sessions = [proc.sid for proc in peer.processes]
                assert sessions and all(session_pids(sid) for sid in sessions)
                raise RuntimeError("benchmark broke")
        except PeerUnavailable as exc:
            pytest.skip(f"redis-server cannot be installed or started here: {exc}")
    assert all(session_pids(sid) == [] for sid in sessions)
    assert peer.processes == [] and peer.workdir is None
