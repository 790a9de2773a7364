"""redis-server with Streams (XADD / XREADGROUP / XACK) through redis-py's asyncio client with
the hiredis reply parser (what redis-py's users install; without it a stream read is parsed in
Python, about 15x slower). The consumer group reads 256 entries per XREADGROUP and acknowledges
each batch with one XACK: the same consumer-group semantics as the RocketMQ peers.

Durability: an append-only file, ``appendfsync everysec`` (acked once in the page cache and
fsync'ed once a second, like lakemq's ASYNC_FLUSH) or ``appendfsync always`` (fsync'ed before
the reply, one fsync per event-loop turn for all clients: group commit, like SYNC_FLUSH).
RDB snapshots are off so that only the AOF writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.peers.base import Durability, OnBody, Peer, PeerClient, TopicProducer
from bench.peers.process import PeerUnavailable, ensure_binary, free_port, wait_until

__all__ = ["RedisAlwaysPeer", "RedisEverysecPeer", "RedisPeer"]

_FIELD = b"b"
_READ_COUNT = 256  # entries per XREADGROUP


class RedisPeer(Peer):
    batch_note = "pipeline of 32 XADD, one round trip"
    appendfsync = "everysec"

    def __init__(self) -> None:
        super().__init__()
        self.port = 0

    def start(self, workdir: Path) -> None:
        binary = ensure_binary("redis-server", "redis-server")
        try:
            import redis.utils
        except ImportError as exc:
            raise PeerUnavailable("the redis package (redis-py) is not installed") from exc
        if not redis.utils.HIREDIS_AVAILABLE:  # not the peer at its best: refuse to measure it
            raise PeerUnavailable("hiredis is not installed (pip install the bench extra)")
        self.port = free_port()
        proc = self.spawn("redis-server", [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--dir", str(workdir), "--appendonly", "yes", "--appendfsync", self.appendfsync,
            "--save", "", "--daemonize", "no", "--logfile", "",
        ])
        wait_until(self._pings, 20, f"redis-server on 127.0.0.1:{self.port}", proc.alive)

    def _pings(self) -> bool:
        import redis

        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as conn:
                return bool(conn.ping())
        except redis.RedisError:
            return False

    def client(self) -> PeerClient:
        return _RedisClient(self.port)


class RedisEverysecPeer(RedisPeer):
    key = "redis-everysec"
    title = "redis 7 Streams, AOF everysec"
    durability = Durability.ASYNC
    settings = "appendonly yes, appendfsync everysec, no RDB"
    appendfsync = "everysec"


class RedisAlwaysPeer(RedisPeer):
    key = "redis-always"
    title = "redis 7 Streams, AOF always"
    durability = Durability.SYNC
    settings = "appendonly yes, appendfsync always, no RDB"
    appendfsync = "always"


class _RedisProducer(TopicProducer):
    def __init__(self, port: int, topic: str) -> None:
        import redis.asyncio as aioredis

        # Concurrent sends on one producer (the latency run) each need a pooled connection;
        # a blocking pool waits for one instead of failing past its size.
        pool = aioredis.BlockingConnectionPool(host="127.0.0.1", port=port, max_connections=64,
                                               timeout=None)
        self._conn = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
        self._topic = topic

    async def send(self, body: bytes) -> None:
        await self._conn.xadd(self._topic, {_FIELD: body})

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        async with self._conn.pipeline(transaction=False) as pipe:
            for body in bodies:
                pipe.xadd(self._topic, {_FIELD: body})
            await pipe.execute()

    async def close(self) -> None:
        await self._conn.aclose()


class _RedisClient(PeerClient):
    def __init__(self, port: int) -> None:
        self._port = port

    async def create_topic(self, topic: str) -> None:
        # A stream exists once it has a group; XGROUP CREATE ... MKSTREAM makes it empty.
        import redis.asyncio as aioredis

        async with aioredis.Redis(host="127.0.0.1", port=self._port) as conn:
            await conn.xgroup_create(topic, "bench-init", id="0", mkstream=True)

    async def producer(self, topic: str) -> TopicProducer:
        return _RedisProducer(self._port, topic)

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        import redis.asyncio as aioredis

        received = 0
        deadline = time.monotonic() + timeout
        async with aioredis.Redis(host="127.0.0.1", port=self._port) as conn:
            await conn.xgroup_create(topic, group, id="0", mkstream=True)
            ready()
            while received < expected and time.monotonic() < deadline:
                reply = await conn.xreadgroup(group, "c1", {topic: ">"}, count=_READ_COUNT, block=100)
                if not reply:
                    continue
                entries = reply[0][1]
                for _, fields in entries:
                    on_body(fields[_FIELD])
                received += len(entries)
                await conn.xack(topic, group, *(entry_id for entry_id, _ in entries))
        return received

    async def close(self) -> None:
        return None
