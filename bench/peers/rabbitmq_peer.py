"""rabbitmq-server (a private node), each queue type through the client its users run for it.

Two queue types, both durable with publisher confirms:

* a **stream** queue, through RabbitMQ's stream protocol (the ``rabbitmq_stream`` plugin) with
  rstream (bench/peers/rabbitmq_stream_client.py): an append-only log read by offset, the
  closest RabbitMQ has to a CommitLog with consumer groups reading it from the start. Its
  confirm is sent once the message is written to the stream's segment file; streams do not
  fsync each write (they lean on replication), so this is compared with lakemq's ASYNC_FLUSH.
* a **quorum** queue, through aio-pika (AMQP 0-9-1, persistent messages): a Raft log whose
  confirms are sent after the write-ahead log is fsync'ed, so it is compared with SYNC_FLUSH.
  It is a queue, not a log: a consumer removes what it acks.

The node gets its own name, epmd (on a free port, started and stopped by us), cookie (HOME is
the temp dir), mnesia and log dirs, config and plugin files, so it cannot clash with a system
instance. The script in /usr/lib/rabbitmq/bin is run directly: Debian's /usr/sbin wrapper would
switch to the rabbitmq user, who cannot write our temp dir.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.peers.base import Durability, OnBody, Peer, PeerClient, TopicProducer
from bench.peers.process import PeerUnavailable, ensure_binary, free_port, wait_tcp, wait_until

__all__ = ["RabbitQuorumPeer", "RabbitStreamPeer"]

_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class _RabbitPeer(Peer):
    queue_type = "stream"
    batch_note = "32 confirmed publishes in flight, one wait for the 32 confirms"

    def __init__(self) -> None:
        super().__init__()
        self.port = 0
        self.stream_port = 0  # the stream protocol's listener (stream peer only)

    def start(self, workdir: Path) -> None:
        ensure_binary("rabbitmq-server", "rabbitmq-server")
        epmd = ensure_binary("epmd", "erlang-base")
        if not Path(_SERVER).is_file():
            raise PeerUnavailable(f"{_SERVER} is missing (not Debian's rabbitmq-server layout)")
        try:
            import aio_pika  # noqa: F401 - fail early with a clear reason
        except ImportError as exc:
            raise PeerUnavailable("the aio-pika package is not installed") from exc
        self.port, epmd_port, dist_port = free_port(), free_port(), free_port()
        conf = f"listeners.tcp.1 = 127.0.0.1:{self.port}\nlog.console = false\nlog.file.level = warning\n"
        plugins = "[]"
        if self.queue_type == "stream":
            self.stream_port = free_port()
            conf += (f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream_port}\n"
                     f"stream.advertised_host = 127.0.0.1\nstream.advertised_port = {self.stream_port}\n")
            plugins = "[rabbitmq_stream]"
        (workdir / "rabbitmq.conf").write_text(conf)
        (workdir / "enabled_plugins").write_text(f"{plugins}.\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(workdir),  # the Erlang cookie is written here
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": f"lakemqbench{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        }
        # Our own epmd, in the foreground, so it is ours to stop (Erlang would otherwise
        # daemonize one on the shared default port and leave it running).
        epmd_proc = self.spawn("epmd", [epmd, "-port", str(epmd_port), "-address", "127.0.0.1"],
                               env=env)
        wait_tcp(epmd_port, 10, "epmd", epmd_proc.alive)
        server = self.spawn("rabbitmq-server", [_SERVER], env=env)
        # RabbitMQ opens its AMQP listener last in its boot; it can take tens of seconds.
        wait_tcp(self.port, 120, "rabbitmq-server", server.alive)
        wait_until(self._connects, 30, "rabbitmq AMQP handshake", server.alive)
        if self.stream_port:
            wait_tcp(self.stream_port, 60, "rabbitmq stream listener", server.alive)

    def _connects(self) -> bool:
        async def attempt() -> bool:
            import aio_pika

            try:
                connection = await aio_pika.connect(self._url(), timeout=2)
            except (TimeoutError, OSError, aio_pika.exceptions.AMQPError):
                return False
            await connection.close()
            return True

        return asyncio.run(attempt())

    def _url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def client(self) -> PeerClient:
        return _RabbitClient(self._url(), self.queue_type)


class RabbitStreamPeer(_RabbitPeer):
    key = "rabbitmq-stream"
    title = "RabbitMQ 3.10 stream (stream protocol)"
    durability = Durability.ASYNC
    settings = "stream, publish confirms (no per-write fsync), rstream client"
    queue_type = "stream"
    batch_note = "one send_batch of 32, one wait for the 32 confirms"

    def start(self, workdir: Path) -> None:
        try:
            import rstream  # noqa: F401 - fail early with a clear reason
        except ImportError as exc:
            raise PeerUnavailable("the rstream package is not installed (the bench extra)") from exc
        super().start(workdir)

    def client(self) -> PeerClient:
        from bench.peers.rabbitmq_stream_client import RabbitStreamClient

        return RabbitStreamClient(self.stream_port)


class RabbitQuorumPeer(_RabbitPeer):
    key = "rabbitmq-quorum"
    title = "RabbitMQ 3.10 quorum queue"
    durability = Durability.SYNC
    settings = "x-queue-type=quorum, persistent messages, publisher confirms after WAL fsync"
    queue_type = "quorum"


class _RabbitProducer(TopicProducer):
    def __init__(self, connection, channel, topic: str) -> None:
        self._connection = connection
        self._exchange = channel.default_exchange
        self._topic = topic

    def _message(self, body: bytes):
        import aio_pika

        return aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)

    async def send(self, body: bytes) -> None:
        await self._exchange.publish(self._message(body), routing_key=self._topic)

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        await asyncio.gather(*(self._exchange.publish(self._message(body), routing_key=self._topic)
                               for body in bodies))

    async def close(self) -> None:
        await self._connection.close()


class _RabbitClient(PeerClient):
    def __init__(self, url: str, queue_type: str) -> None:
        self._url = url
        self._queue_type = queue_type

    async def create_topic(self, topic: str) -> None:
        import aio_pika

        connection = await aio_pika.connect(self._url)
        try:
            channel = await connection.channel()
            await channel.declare_queue(topic, durable=True,
                                        arguments={"x-queue-type": self._queue_type})
        finally:
            await connection.close()

    async def producer(self, topic: str) -> TopicProducer:
        import aio_pika

        connection = await aio_pika.connect(self._url)
        channel = await connection.channel(publisher_confirms=True)
        return _RabbitProducer(connection, channel, topic)

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        import aio_pika

        received = 0
        done = asyncio.Event()
        connection = await aio_pika.connect(self._url)
        try:
            channel = await connection.channel()
            # Streams require a prefetch and manual acks; acks are batched with multiple=True.
            await channel.set_qos(prefetch_count=1024)
            queue = await channel.declare_queue(topic, durable=True, passive=True)
            arguments = {"x-stream-offset": "first"} if self._queue_type == "stream" else {}

            async def on_message(message) -> None:
                nonlocal received
                on_body(message.body)
                received += 1
                if received % 256 == 0 or received >= expected:
                    await message.ack(multiple=True)
                if received >= expected:
                    done.set()

            await queue.consume(on_message, arguments=arguments, consumer_tag=f"{group}-1")
            ready()
            try:
                await asyncio.wait_for(done.wait(), timeout)
            except TimeoutError:
                pass
        finally:
            await connection.close()
        return received

    async def close(self) -> None:
        return None
