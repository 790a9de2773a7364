"""RabbitMQ stream queues through RabbitMQ's stream protocol (port 5552 style, the
``rabbitmq_stream`` plugin) with ``rstream``, the RabbitMQ team's Python stream client: what
stream users run for throughput, instead of AMQP 0-9-1.

Every send waits for the broker's publish confirm (``send_wait``; a batch of 32 is one
``send_batch`` whose 32 confirms are awaited). Bodies use rstream's binary codec (bytes as they
are; the AMQP 1.0 codec is for mixing clients). The consumer reads from the stream's first
offset and stores its offset on the server under its name every 256 messages and at the end:
a stream's server-side offset tracking, its form of a consumer group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.peers.base import OnBody, PeerClient, TopicProducer

__all__ = ["RabbitStreamClient"]

_STORE_EVERY = 256


class _StreamProducer(TopicProducer):
    def __init__(self, producer: Any, stream: str) -> None:
        self._producer = producer
        self._stream = stream

    async def send(self, body: bytes) -> None:
        await self._producer.send_wait(self._stream, body)

    async def send_batch(self, bodies: Sequence[bytes]) -> None:
        confirmed = 0
        done = asyncio.Event()
        failed: list[object] = []

        def on_confirm(status: Any) -> None:
            nonlocal confirmed
            if not status.is_confirmed:
                failed.append(status.response_code)
            confirmed += 1
            if confirmed == len(bodies):
                done.set()

        await self._producer.send_batch(self._stream, list(bodies), on_publish_confirm=on_confirm)
        await done.wait()
        if failed:
            raise RuntimeError(f"stream publish not confirmed: {failed[0]}")

    async def close(self) -> None:
        await self._producer.close()


class RabbitStreamClient(PeerClient):
    def __init__(self, port: int) -> None:
        self._port = port

    def _producer(self) -> Any:
        from rstream import Producer

        return Producer("127.0.0.1", self._port, username="guest", password="guest")

    async def create_topic(self, topic: str) -> None:
        producer = self._producer()
        await producer.start()
        try:
            await producer.create_stream(topic, exists_ok=True)
        finally:
            await producer.close()

    async def producer(self, topic: str) -> TopicProducer:
        producer = self._producer()
        await producer.start()
        return _StreamProducer(producer, topic)

    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        received = 0
        done = asyncio.Event()
        consumer = Consumer("127.0.0.1", self._port, username="guest", password="guest")
        await consumer.start()

        async def on_message(body: bytes, context: Any) -> None:
            nonlocal received
            on_body(body)
            received += 1
            if received % _STORE_EVERY == 0 or received >= expected:
                await consumer.store_offset(stream=topic, offset=context.offset, subscriber_name=group)
            if received >= expected:
                done.set()

        runner = asyncio.create_task(consumer.run())
        try:
            await consumer.subscribe(topic, on_message, decoder=lambda raw: raw, subscriber_name=group,
                                     offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
            ready()
            deadline = time.monotonic() + timeout
            try:
                await asyncio.wait_for(done.wait(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                pass
        finally:
            await consumer.close()
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        return received

    async def close(self) -> None:
        return None
