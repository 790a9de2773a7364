"""lakemq itself as a peer: ``lakemq namesrv`` and ``lakemq broker`` as subprocesses, driven
through lakemq.client (Producer, PushConsumer on its defaults with a plain listener, and
PullConsumer; asyncio core).

Durability: ``flushDiskType=ASYNC_FLUSH`` (the send is acked once the record is in the mapped
CommitLog; a flush service syncs in the background) or ``SYNC_FLUSH`` (acked after the group
commit has flushed the record). Each producer is its own client instance (its own
``instanceName``), so it has its own connections, like the other peers' producers.
"""

from __future__ import annotations

import asyncio
import errno
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.peers.base import Durability, OnBody, Peer, PeerClient, TopicProducer
from bench.peers.process import PeerUnavailable, free_port, wait_until

if TYPE_CHECKING:
    from lakemq.common.message_queue import MessageQueue

__all__ = ["LakemqAsyncPeer", "LakemqSyncPeer", "RocketMQProtocolClient"]

_QUEUES = 8  # the broker's defaultTopicQueueNums
_ROUTE_TIMEOUT = 40.0
_PORT_ATTEMPTS = 3


def _cli(*args: str) -> list[str]:
    # The interpreter running the benchmark (the project venv) runs the CLI, installed or not.
    return [sys.executable, "-c", "import sys; from lakemq.cli import main; sys.exit(main())", *args]


class _LakemqPeer(Peer):
    flush_disk_type = "ASYNC_FLUSH"
    batch_note = "one SEND_BATCH_MESSAGE of 32 (stored together), one wait"

    def __init__(self) -> None:
        super().__init__()
        self.namesrv_addr = ""

    def start(self, workdir: Path) -> None:
        try:
            from lakemq.client import Producer, PushConsumer  # noqa: F401 - fail early, clearly
        except ImportError as exc:
            raise PeerUnavailable(f"lakemq.client has no Producer/PushConsumer yet: {exc}") from exc
        logs = str(workdir / "logs")

        def namesrv(port: int) -> None:
            self.namesrv_addr = f"127.0.0.1:{port}"
            (workdir / "namesrv.conf").write_text(
                f"listenHost=127.0.0.1\nlistenPort={port}\nkvConfigPath={workdir / 'namesrv' / 'kvConfig.json'}\n")
            server = self.spawn("namesrv", _cli("namesrv", "-c", str(workdir / "namesrv.conf"), "--log-dir", logs))
            # Its own line, not an accepted connection: whoever took the port would accept too.
            wait_until(lambda: "boot success" in server.log_tail(), 30, "lakemq namesrv", server.alive)

        def broker(port: int) -> None:
            (workdir / "broker.conf").write_text(
                "brokerClusterName=BenchCluster\n"
                "brokerName=bench-broker\n"
                f"listenPort={port}\n"
                f"namesrvAddr={self.namesrv_addr}\n"
                f"storePathRootDir={workdir / 'store'}\n"
                f"flushDiskType={self.flush_disk_type}\n"
                "autoCreateTopicEnable=true\n"
                f"defaultTopicQueueNums={_QUEUES}\n"
            )
            server = self.spawn("broker", _cli("broker", "-c", str(workdir / "broker.conf"), "--log-dir", logs))
            # The broker prints this line once it listens and has registered (as RocketMQ does).
            wait_until(lambda: "boot success" in server.log_tail(), 60, "lakemq broker", server.alive)

        self._on_a_free_port(namesrv)
        self._on_a_free_port(broker)

    def _on_a_free_port(self, start: Callable[[int], None]) -> None:
        """``start(port)`` on a free port; on another one if something took it in between (the
        server exited with EADDRINUSE)."""
        for attempt in range(_PORT_ATTEMPTS):
            try:
                start(free_port())
                return
            except PeerUnavailable:
                taken = f"[Errno {errno.EADDRINUSE}]" in self.processes[-1].log_tail()
                if not taken or attempt == _PORT_ATTEMPTS - 1:
                    raise
                self.processes.pop().stop()

    def client(self) -> PeerClient:
        return RocketMQProtocolClient(self.namesrv_addr)


class LakemqAsyncPeer(_LakemqPeer):
    key = "lakemq-async"
    title = "lakemq, ASYNC_FLUSH"
    durability = Durability.ASYNC
    settings = "flushDiskType=ASYNC_FLUSH"
    flush_disk_type = "ASYNC_FLUSH"


class LakemqSyncPeer(_LakemqPeer):
    key = "lakemq-sync"
    title = "lakemq, SYNC_FLUSH"
    durability = Durability.SYNC
    settings = "flushDiskType=SYNC_FLUSH (group commit)"
    flush_disk_type = "SYNC_FLUSH"


class _LakemqProducer(TopicProducer):
    def __init__(self, producer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    async def send(self, body: bytes) -> None:
        from lakemq.common.message import Message

        await self._producer.send(Message(self._topic, body))

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        from lakemq.common.message import Message

        await self._producer.send_batch([Message(self._topic, body) for body in bodies])

    async def close(self) -> None:
        await self._producer.shutdown()


class RocketMQProtocolClient(PeerClient):
    """lakemq's Python client against any RocketMQ-protocol NameServer (lakemq's or Apache
    RocketMQ's own)."""

    def __init__(self, namesrv_addr: str) -> None:
        self._namesrv_addr = namesrv_addr
        self._instances = 0

    def _client_config(self):
        from lakemq.client.config import ClientConfig

        self._instances += 1
        return ClientConfig(namesrv_addr=self._namesrv_addr, instance_name=f"bench-{self._instances}")

    async def create_topic(self, topic: str) -> None:
        from lakemq.client import Producer

        producer = Producer("bench_admin", client_config=self._client_config())
        await producer.start()
        try:
            deadline = time.monotonic() + _ROUTE_TIMEOUT
            # The broker registers with the name server after it starts listening; until then
            # there is no route to TBW102 to create the topic through.
            while True:
                try:
                    await producer.create_topic(topic, _QUEUES)
                    queues = await producer.fetch_publish_message_queues(topic)
                    if queues:
                        return
                except Exception as exc:
                    if time.monotonic() > deadline:
                        raise PeerUnavailable(f"lakemq: cannot create topic {topic}: {exc}") from exc
                if time.monotonic() > deadline:
                    raise PeerUnavailable(f"lakemq: no route to {topic} after {_ROUTE_TIMEOUT:.0f} s")
                await asyncio.sleep(0.3)
        finally:
            await producer.shutdown()

    async def producer(self, topic: str) -> TopicProducer:
        from lakemq.client import Producer

        producer = Producer("bench_producer", client_config=self._client_config())
        await producer.start()
        return _LakemqProducer(producer, topic)

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        """A PushConsumer on its default settings (one message per listener call) with a plain
        listener, which runs in the consumer's worker threads as a user's does."""
        from lakemq.client import ConsumeConcurrentlyStatus, PushConsumer
        from lakemq.client.config import ConsumeFromWhere, ConsumerConfig

        received = 0
        lock = threading.Lock()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def listener(messages, context) -> ConsumeConcurrentlyStatus:
            nonlocal received
            for message in messages:
                on_body(message.body)
            with lock:
                received += len(messages)
                if received >= expected:
                    loop.call_soon_threadsafe(done.set)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer(
            group, client_config=self._client_config(),
            config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET))
        consumer.subscribe(topic, "*")
        consumer.register_message_listener_concurrently(listener)
        await consumer.start()
        try:
            ready()
            try:
                await asyncio.wait_for(done.wait(), timeout)
            except TimeoutError:
                pass
        finally:
            await consumer.shutdown()
        return received

    async def consume_pull(self, topic: str, expected: int, on_body: OnBody, timeout: float) -> int | None:
        """A PullConsumer pulling 32 at a time from each queue's start, every queue in its own
        task (one pull in flight per queue), as RocketMQ's LitePullConsumer pulls its queues."""
        from lakemq.client import PullConsumer, PullStatus

        consumer = PullConsumer("bench_pull", client_config=self._client_config())
        await consumer.start()
        received = 0
        deadline = time.monotonic() + timeout

        async def read(mq: MessageQueue) -> None:
            nonlocal received
            offset = 0
            while received < expected and time.monotonic() < deadline:
                result = await consumer.pull(mq, "*", offset, 32)
                if result.pull_status is not PullStatus.FOUND:
                    return
                for message in result.msgs:
                    on_body(message.body)
                received += len(result.msgs)
                offset = result.next_begin_offset

        try:
            await asyncio.gather(*(read(mq) for mq in await consumer.fetch_subscribe_message_queues(topic)))
        finally:
            await consumer.shutdown()
        return received

    async def close(self) -> None:
        return None
