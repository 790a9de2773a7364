"""Apache Kafka 4.4 as a peer: one KRaft node (broker and controller in one process, as Kafka's
own single-node quick start runs it) from the Maven jars (jvm/kafka, bench/jvm.py), driven by
confluent-kafka, the librdkafka-based Python client most Kafka users in Python run.

Durability: every send is ``acks=all`` with the idempotent producer. On one node, ``acks=all``
means the leader appended the batch to its log segment, i.e. the OS page cache: Kafka's default
(``log.flush.interval.messages`` and ``log.flush.interval.ms`` unset) never fsyncs on the write
path and leaves durability to replication, so the default row compares with lakemq's
ASYNC_FLUSH. ``log.flush.interval.messages=1`` makes the request handler fsync the partition's
segment after every append, before the acknowledgement: the row that compares with SYNC_FLUSH.

The client is set up as its users run it for this workload: ``linger.ms=0`` (see _PRODUCER),
``batch.size`` 1 MiB, no compression (the bench bodies would compress to nothing, which no other peer is granted). Its
callbacks run on a thread per producer that polls librdkafka and hands each delivery report to
the asyncio loop.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.jvm import JvmUnavailable, ensure_groups, java_command
from bench.peers.base import Durability, OnBody, Peer, PeerClient, TopicProducer
from bench.peers.process import PeerUnavailable, free_port, wait_until

__all__ = ["KafkaFsyncPeer", "KafkaPeer"]

_PARTITIONS = 8  # lakemq's and RocketMQ's defaultTopicQueueNums
_HEAP = "1g"  # kafka-server-start.sh's default KAFKA_HEAP_OPTS
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
_GC = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
       "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")
_READY = "Kafka Server started"
_LOG4J = """<Configuration>
  <Appenders><Console name="out" target="SYSTEM_OUT">
    <PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="INFO"><AppenderRef ref="out"/></Root></Loggers>
</Configuration>
"""
# linger.ms=0, not librdkafka's default 5: every send here waits for its report or goes with
# its batch at once, so lingering would only add 5 ms to each wait; librdkafka still batches
# whatever queues while earlier requests are in flight (5 per connection, idempotent).
_PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 0, "batch.size": 1 << 20,
             "compression.type": "none", "log_level": 3}


class _KafkaPeer(Peer):
    flush_messages: int | None = None
    batch_note = "32 produce() calls, one wait for the 32 delivery reports (librdkafka batches them)"

    def __init__(self) -> None:
        super().__init__()
        self.bootstrap = ""

    def start(self, workdir: Path) -> None:
        try:
            ensure_groups("kafka")
            import confluent_kafka  # noqa: F401 - fail early with a clear reason
        except (JvmUnavailable, ImportError) as exc:
            raise PeerUnavailable(f"Apache Kafka cannot run here: {exc}") from exc
        broker_port, controller_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{broker_port}"
        props = workdir / "server.properties"
        flush = f"log.flush.interval.messages={self.flush_messages}\n" if self.flush_messages else ""
        props.write_text(
            "process.roles=broker,controller\n"
            "node.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker_port}\n"
            "controller.listener.names=CONTROLLER\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
            f"log.dirs={workdir / 'data'}\n"
            f"num.partitions={_PARTITIONS}\n"
            "offsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\n"
            "share.coordinator.state.topic.replication.factor=1\n"
            "share.coordinator.state.topic.min.isr=1\n"
            # Kafka's shipped server.properties sets 0 for a single node: no 3 s wait per group.
            "group.initial.rebalance.delay.ms=0\n"
            + flush
        )
        (workdir / "log4j2.xml").write_text(_LOG4J)
        options = (f"-Dlog4j2.configurationFile={workdir / 'log4j2.xml'}",
                   f"-Dkafka.logs.dir={workdir / 'logs'}")

        def java(main: str, args: list[str], heap: str) -> list[str]:
            return java_command(main, args, groups=("kafka",), heap=heap, gc=_GC, options=options)

        # kafka-storage reads an id starting with '-' as an option (Kafka's own ids never start so).
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            formatted = subprocess.run(
                java("kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(props)], "256m"),
                capture_output=True, text=True, timeout=180, check=False, cwd=workdir)
        except subprocess.TimeoutExpired as exc:
            raise PeerUnavailable("kafka-storage format did not finish in 180 s") from exc
        if formatted.returncode != 0:
            raise PeerUnavailable(f"kafka-storage format failed: {(formatted.stdout + formatted.stderr)[-1500:]}")
        broker = self.spawn("kafka", java("kafka.Kafka", [str(props)], _HEAP), env=dict(os.environ))
        self.broker = broker
        wait_until(lambda: _READY in broker.log_tail(200), 120, "Apache Kafka", broker.alive)

    def client(self) -> PeerClient:
        return _KafkaClient(self.bootstrap)


class KafkaPeer(_KafkaPeer):
    key = "kafka"
    title = "Apache Kafka 4.4 KRaft, acks=all"
    durability = Durability.ASYNC
    settings = "acks=all, idempotent; default flush (no fsync per write: page cache, replication)"


class KafkaFsyncPeer(_KafkaPeer):
    key = "kafka-fsync"
    title = "Apache Kafka 4.4 KRaft, acks=all, flush every message"
    durability = Durability.SYNC
    settings = "acks=all, idempotent; log.flush.interval.messages=1 (fsync before the ack)"
    flush_messages = 1


class _Poller:
    """A thread serving one librdkafka handle's callbacks (delivery reports) until stopped."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-poll", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._handle.poll(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _KafkaProducer(TopicProducer):
    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self._loop = asyncio.get_running_loop()
        self._producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER})
        self._topic = topic
        self._poller = _Poller(self._producer)

    async def connect(self) -> None:
        """Connect and learn the topic's leaders before the clock starts, as the other peers'
        producers are connected when made (the idempotent producer asks for its id then too)."""
        await asyncio.to_thread(self._producer.list_topics, self._topic, 30)

    def _produce(self, body: bytes) -> asyncio.Future[None]:
        done: asyncio.Future[None] = self._loop.create_future()

        def report(err: Any, _msg: Any) -> None:  # on the poll thread
            self._loop.call_soon_threadsafe(_settle, done, err)

        while True:
            try:
                self._producer.produce(self._topic, body, on_delivery=report)
                return done
            except BufferError:  # librdkafka's local queue is full: let the poll thread drain it
                time.sleep(0.001)

    async def send(self, body: bytes) -> None:
        await self._produce(body)

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        await asyncio.gather(*(self._produce(body) for body in bodies))

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.flush, 30)
        self._poller.stop()


def _settle(done: asyncio.Future[None], err: Any) -> None:
    if done.done():
        return
    if err is None:
        done.set_result(None)
    else:
        from confluent_kafka import KafkaException

        done.set_exception(KafkaException(err))


class _KafkaClient(PeerClient):
    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap

    async def create_topic(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": self._bootstrap})
        [created] = admin.create_topics([NewTopic(topic, num_partitions=_PARTITIONS, replication_factor=1)]).values()
        await asyncio.wrap_future(created)

    async def producer(self, topic: str) -> TopicProducer:
        producer = _KafkaProducer(self._bootstrap, topic)
        await producer.connect()
        return producer

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True})
        consumer.subscribe([topic])
        # From the earliest offset: whatever is sent after this is read, whenever the group's
        # partitions are assigned.
        ready()
        stop = threading.Event()
        deadline = time.monotonic() + timeout

        def read() -> int:
            received = 0
            try:
                while received < expected and time.monotonic() < deadline and not stop.is_set():
                    # consume() waits until its batch is full or its timeout passes, which
                    # would hold each message up to that timeout: wait for the first one only,
                    # then take what has already been fetched without waiting.
                    first = consumer.poll(0.2)
                    if first is None:
                        continue
                    for message in [first, *consumer.consume(num_messages=511, timeout=0)]:
                        body = message.value()
                        if message.error() is None and body is not None:
                            on_body(body)
                            received += 1
            finally:
                consumer.close()  # commits the offsets read and leaves the group
            return received

        work = asyncio.ensure_future(asyncio.to_thread(read))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.gather(work, return_exceptions=True)
            raise

    async def close(self) -> None:
        return None
