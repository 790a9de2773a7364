"""nats-server with JetStream file storage through nats-py.

Durability: a file-storage stream with one replica; ``js.publish`` returns on the PubAck, sent
once the message is written to the stream's block file (the OS page cache). Debian bookworm
ships nats-server 2.9, which has no ``sync_interval`` option (it came in 2.10, where
``sync_interval: always`` fsyncs every write), so JetStream is measured only with its
background sync and compared with lakemq's ASYNC_FLUSH.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.peers.base import Durability, OnBody, Peer, PeerClient, TopicProducer
from bench.peers.process import PeerUnavailable, ensure_binary, free_port, wait_tcp

__all__ = ["NatsPeer"]


class NatsPeer(Peer):
    key = "nats"
    title = "NATS 2.9 JetStream, file storage"
    durability = Durability.ASYNC
    settings = "JetStream file store, 1 replica, default (background) sync"
    batch_note = "32 publishes in flight, one wait for the 32 PubAcks"

    def __init__(self) -> None:
        super().__init__()
        self.port = 0

    def start(self, workdir: Path) -> None:
        binary = ensure_binary("nats-server", "nats-server")
        try:
            import nats  # noqa: F401 - fail early with a clear reason
        except ImportError as exc:
            raise PeerUnavailable("the nats-py package is not installed") from exc
        self.port = free_port()
        conf = workdir / "nats.conf"
        conf.write_text(
            f'listen: "127.0.0.1:{self.port}"\n'
            "max_payload: 1048576\n"
            f'jetstream {{ store_dir: "{workdir / "jetstream"}", max_file_store: 8G, '
            "max_memory_store: 256M }\n"
        )
        proc = self.spawn("nats-server", [binary, "-c", str(conf)])
        wait_tcp(self.port, 20, "nats-server", proc.alive)

    def client(self) -> PeerClient:
        return _NatsClient(f"nats://127.0.0.1:{self.port}")


class _NatsProducer(TopicProducer):
    def __init__(self, connection, topic: str) -> None:
        self._nc = connection
        self._js = connection.jetstream()
        self._topic = topic

    async def send(self, body: bytes) -> None:
        await self._js.publish(self._topic, body)

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        await asyncio.gather(*(self._js.publish(self._topic, body) for body in bodies))

    async def close(self) -> None:
        await self._nc.close()


class _NatsClient(PeerClient):
    def __init__(self, url: str) -> None:
        self._url = url

    async def _connect(self):
        import nats

        return await nats.connect(self._url, max_reconnect_attempts=0)

    async def create_topic(self, topic: str) -> None:
        from nats.js.api import StorageType

        nc = await self._connect()
        try:
            await nc.jetstream().add_stream(name=topic, subjects=[topic], storage=StorageType.FILE,
                                            num_replicas=1)
        finally:
            await nc.close()

    async def producer(self, topic: str) -> TopicProducer:
        return _NatsProducer(await self._connect(), topic)

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        received = 0
        deadline = time.monotonic() + timeout
        nc = await self._connect()
        try:
            # A durable pull consumer is JetStream's consumer group; AckAll acknowledges a whole
            # fetched batch with one ack of its last message.
            sub = await nc.jetstream().pull_subscribe(
                topic, durable=group, stream=topic,
                config=ConsumerConfig(ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL,
                                      max_ack_pending=4096))
            ready()
            while received < expected and time.monotonic() < deadline:
                try:
                    messages = await sub.fetch(batch=512, timeout=0.2)
                except NatsTimeout:
                    continue
                for message in messages:
                    on_body(message.data)
                received += len(messages)
                if messages:
                    await messages[-1].ack()
        finally:
            await nc.close()
        return received

    async def close(self) -> None:
        return None
