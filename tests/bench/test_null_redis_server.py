"""The ceiling benchmark's Python RESP server does what redis-server does for redis-py's XADD
before it answers: the request is in the append-only file, each XADD gets a distinct, rising
entry id, a pipeline of 32 gets 32, and a reply never overtakes an earlier one. Otherwise its
row would not bound anything."""

from __future__ import annotations

import pytest

pytest.importorskip("hiredis", reason="the bench extra (redis-py with hiredis) is not installed")

import redis

from bench.peers.null_redis_peer import NullRedisAlwaysPeer, NullRedisEverysecPeer


def _stream_id(entry: bytes) -> tuple[int, int]:
    ms, seq = entry.split(b"-")
    return int(ms), int(seq)


@pytest.mark.parametrize("peer_class", [NullRedisAlwaysPeer, NullRedisEverysecPeer])
def test_xadd_is_in_the_file_before_its_answer(peer_class: type[NullRedisAlwaysPeer]) -> None:
    with peer_class() as peer:
        assert peer.workdir is not None
        aof = peer.workdir / "appendonly.aof"
        with redis.Redis(host="127.0.0.1", port=peer.port) as conn:  # RESP3, as the bench's client
            conn.xgroup_create("t", "g", id="0", mkstream=True)
            ids = []
            for i in range(5):
                body = f"body-{i}".encode()
                ids.append(_stream_id(conn.xadd("t", {b"b": body})))
                assert body in aof.read_bytes()  # written (and under always fsync'ed) first
            pipe = conn.pipeline(transaction=False)
            for i in range(32):
                pipe.xadd("t", {b"b": f"batch-{i}".encode()})
            pipe.ping()  # answered after the XADDs before it, in order
            *entries, pong = pipe.execute()
            assert pong is True
            ids.extend(_stream_id(entry) for entry in entries)
            assert b"batch-31" in aof.read_bytes()
        assert len(ids) == 37 and ids == sorted(set(ids))
