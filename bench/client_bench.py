"""lakemq.client's own CPU per message, against a real broker on loopback.

    .venv/bin/python bench/client_bench.py [--messages N] [--only send,sync_send,push,pull,pull_serial,latency]
                                           [--flush ASYNC_FLUSH|SYNC_FLUSH]

A `lakemq namesrv` and a `lakemq broker` run as subprocesses (bench/broker_bench.py starts
them); the client runs in this process. Phases, each on its own topic:

- ``send``: one asyncio Producer, sequential ``await send`` of 1 KiB messages;
- ``send_16``: one asyncio Producer shared by 16 tasks, each awaiting its sends in turn: 16
  sends in flight on one connection, as a service whose requests share a producer (RocketMQ's
  advice: one producer per process);
- ``sync_send``: one SyncProducer, sequential blocking ``send`` from the main thread;
- ``push``: the messages stored first by batches, then read by one PushConsumer on its default
  settings with a plain-function listener that does nothing (run in worker threads);
- ``pull``: the same messages read by one PullConsumer, pull(32), each queue in its own task
  (one pull in flight per queue, as RocketMQ's LitePullConsumer pulls its queues);
- ``pull_serial``: the same, queue after queue with one pull in flight in all: every pull
  pays a wake-up of both processes;
- ``latency``: a Producer sending at a fixed rate (``--rate``) while a PushConsumer on its
  defaults receives; latency = receipt in the listener - the send's scheduled time.

Printed per phase: msg/s, the client's CPU per message (this process's user + system time,
every thread) and the broker's (from /proc). On a shared machine compare CPU per message:
wall rates move with the neighbours, or count the client's instructions, which do not move:

    valgrind --tool=callgrind --instr-atstart=no .venv/bin/python bench/client_bench.py --callgrind ...

collects only while a phase is measured (callgrind_control switches it on and off), so the
instructions per message are the total over the messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `lakemq` importable
    sys.path.insert(0, str(ROOT))

from bench.broker_bench import cpu_seconds, servers
from lakemq.client import (
    ConsumeConcurrentlyStatus,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SyncProducer,
)
from lakemq.client.config import ClientConfig, ConsumeFromWhere, ConsumerConfig
from lakemq.client.sync import background_loop
from lakemq.common.message_queue import MessageQueue
from lakemq.remoting import event_loop

BODY = os.urandom(1024)
PHASES = ("send", "send_16", "sync_send", "push", "pull", "pull_serial", "latency")
IN_FLIGHT = 16  # send_16's concurrent senders


_CALLGRIND = False  # --callgrind: switch callgrind's instrumentation on for measured phases only


def _instrument(on: bool) -> None:
    if _CALLGRIND:
        subprocess.run(["callgrind_control", "--instr=on" if on else "--instr=off", str(os.getpid())],
                       check=True, stdout=subprocess.DEVNULL)


class _Meter:
    """CPU of this process and of the broker, and wall time, over one phase."""

    def __init__(self, broker_pid: int) -> None:
        _instrument(True)
        self.broker_pid = broker_pid
        self.wall = time.monotonic()
        self.client = time.process_time()
        self.broker = cpu_seconds(broker_pid)

    def report(self, name: str, messages: int, extra: str = "") -> None:
        _instrument(False)
        wall = time.monotonic() - self.wall
        client = (time.process_time() - self.client) / max(messages, 1) * 1e6
        broker = (cpu_seconds(self.broker_pid) - self.broker) / max(messages, 1) * 1e6
        print(f"{name}: {messages:,} msgs, {messages / wall:,.0f} msg/s, client CPU {client:.1f} us/msg, "
              f"broker CPU {broker:.1f} us/msg{extra}", flush=True)


def _config(namesrv: str, name: str) -> ClientConfig:
    return ClientConfig(namesrv_addr=namesrv, instance_name=name)


async def _create_topic(namesrv: str, topic: str) -> None:
    producer = Producer("bench_admin", client_config=_config(namesrv, f"admin-{topic}"))
    await producer.start()
    try:
        await producer.create_topic(topic, 8)
        deadline = time.monotonic() + 30
        while not await producer.fetch_publish_message_queues(topic):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no route to {topic}")
            await asyncio.sleep(0.2)
    finally:
        await producer.shutdown()


async def _send(namesrv: str, topic: str, count: int, pid: int) -> None:
    producer = Producer("bench_pg", client_config=_config(namesrv, "send"))
    await producer.start()
    try:
        for _ in range(100):  # warm: route, connection
            await producer.send(Message(topic, BODY))
        meter = _Meter(pid)
        for _ in range(count):
            await producer.send(Message(topic, BODY))
        meter.report("send", count)
    finally:
        await producer.shutdown()


async def _send_shared(namesrv: str, topic: str, count: int, pid: int) -> None:
    producer = Producer("bench_pg", client_config=_config(namesrv, "send-16"))
    await producer.start()

    async def sender(n: int) -> None:
        for _ in range(n):
            await producer.send(Message(topic, BODY))

    try:
        await asyncio.gather(*(sender(100 // IN_FLIGHT + 1) for _ in range(IN_FLIGHT)))  # warm
        each = max(count // IN_FLIGHT, 1)
        meter = _Meter(pid)
        await asyncio.gather(*(sender(each) for _ in range(IN_FLIGHT)))
        meter.report("send_16", each * IN_FLIGHT)
    finally:
        await producer.shutdown()


def _sync_send(namesrv: str, topic: str, count: int, pid: int) -> None:
    producer = SyncProducer("bench_pg", client_config=_config(namesrv, "sync-send"))
    producer.start()
    try:
        for _ in range(100):
            producer.send(Message(topic, BODY))
        meter = _Meter(pid)
        for _ in range(count):
            producer.send(Message(topic, BODY))
        meter.report("sync_send", count)
    finally:
        producer.shutdown()


async def _fill(namesrv: str, topic: str, count: int) -> None:
    producer = Producer("bench_pg", client_config=_config(namesrv, f"fill-{topic}"))
    await producer.start()
    try:
        for _ in range(count // 32):
            await producer.send_batch([Message(topic, BODY) for _ in range(32)])
    finally:
        await producer.shutdown()


async def _push(namesrv: str, topic: str, count: int, pid: int) -> None:
    received = 0
    lock = threading.Lock()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def listener(messages, context) -> ConsumeConcurrentlyStatus:
        nonlocal received
        with lock:
            received += len(messages)
            if received >= count:
                loop.call_soon_threadsafe(done.set)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench_push", client_config=_config(namesrv, "push"),
                            config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET))
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_concurrently(listener)
    meter = _Meter(pid)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 300)
        meter.report("push", received)
    finally:
        await consumer.shutdown()


async def _pull(namesrv: str, topic: str, pid: int, *, one_at_a_time: bool) -> None:
    consumer = PullConsumer("bench_pull", client_config=_config(namesrv, "pull"))
    await consumer.start()
    try:
        queues = await consumer.fetch_subscribe_message_queues(topic)
        meter = _Meter(pid)
        received = 0

        async def read(mq: MessageQueue) -> None:
            nonlocal received
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 32)
                if result.pull_status is not PullStatus.FOUND:
                    return
                received += len(result.msgs)
                offset = result.next_begin_offset

        if one_at_a_time:
            for mq in queues:
                await read(mq)
        else:
            await asyncio.gather(*(read(mq) for mq in queues))
        meter.report("pull_serial" if one_at_a_time else "pull", received)
    finally:
        await consumer.shutdown()


async def _latency(namesrv: str, topic: str, rate: int, seconds: float, pid: int) -> None:
    total = int(rate * seconds)
    latencies: list[float] = []
    got_first = asyncio.Event()
    loop = asyncio.get_running_loop()

    def listener(messages, context) -> ConsumeConcurrentlyStatus:
        now = time.monotonic_ns()
        for message in messages:
            stamp = int.from_bytes(message.body[:8], "big")
            if stamp == 0:
                loop.call_soon_threadsafe(got_first.set)
            else:
                latencies.append((now - stamp) / 1e6)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench_latency", client_config=_config(namesrv, "latency-consumer"))
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    producer = Producer("bench_pg", client_config=_config(namesrv, "latency-producer"))
    await producer.start()
    try:
        while not got_first.is_set():  # until the consumer owns its queues and receives
            await producer.send(Message(topic, bytes(8) + BODY[8:]))
            try:
                await asyncio.wait_for(got_first.wait(), 1.0)
            except TimeoutError:
                pass
        meter = _Meter(pid)
        start = time.monotonic_ns() + 10_000_000
        sends: set[asyncio.Task[object]] = set()
        for i in range(total):
            due = start + i * 1_000_000_000 // rate
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(producer.send(Message(topic, due.to_bytes(8, "big") + BODY[8:])))
            sends.add(task)
            task.add_done_callback(sends.discard)
        await asyncio.gather(*sends)
        deadline = time.monotonic() + 10
        while len(latencies) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        values = sorted(latencies)

        def pct(q: float) -> float:
            return values[min(len(values) - 1, int(q / 100 * len(values)))] if values else float("nan")

        meter.report("latency", len(values), f" (at {rate:,} msg/s: p50 {pct(50):.2f} ms, p90 {pct(90):.2f} ms, "
                                             f"p99 {pct(99):.2f} ms, max {values[-1] if values else 0:.2f} ms)")
    finally:
        await producer.shutdown()
        await consumer.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per phase [20000]")
    parser.add_argument("--only", default=",".join(PHASES), help=f"phases, comma-separated: {', '.join(PHASES)}")
    parser.add_argument("--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH")
    parser.add_argument("--rate", type=int, default=5000, help="latency phase rate, msg/s [5000]")
    parser.add_argument("--seconds", type=float, default=5.0, help="latency phase length [5]")
    parser.add_argument("--profile", type=Path, help="profile the broker (cProfile, all threads) into this dir")
    parser.add_argument("--callgrind", action="store_true",
                        help="run under valgrind --tool=callgrind --instr-atstart=no: instrument measured phases only")
    args = parser.parse_args()
    global _CALLGRIND
    _CALLGRIND = args.callgrind
    phases = args.only.split(",")
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="client_bench_"))
    try:
        with servers(work, args.flush, args.profile) as (namesrv, _broker, pid):
            topics = {phase: f"ClientBench_{phase}" for phase in PHASES}
            topics["pull"] = topics["pull_serial"] = topics["push"]

            def run(coro_fn: Callable[[], object]) -> None:
                event_loop.run(coro_fn())  # type: ignore[arg-type]

            for topic in sorted(set(topics.values())):
                run(lambda topic=topic: _create_topic(namesrv, topic))
            if "send" in phases:
                run(lambda: _send(namesrv, topics["send"], args.messages, pid))
            if "send_16" in phases:
                run(lambda: _send_shared(namesrv, topics["send_16"], args.messages, pid))
            if "sync_send" in phases:
                _sync_send(namesrv, topics["sync_send"], args.messages, pid)
            if {"push", "pull", "pull_serial"} & set(phases):
                run(lambda: _fill(namesrv, topics["push"], args.messages))
            if "push" in phases:
                run(lambda: _push(namesrv, topics["push"], args.messages // 32 * 32, pid))
            if "pull" in phases:
                run(lambda: _pull(namesrv, topics["pull"], pid, one_at_a_time=False))
            if "pull_serial" in phases:
                run(lambda: _pull(namesrv, topics["pull"], pid, one_at_a_time=True))
            if "latency" in phases:
                run(lambda: _latency(namesrv, topics["latency"], args.rate, args.seconds, pid))
            background_loop().call_soon_threadsafe(lambda: None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
