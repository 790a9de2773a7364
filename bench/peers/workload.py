"""The one workload every peer runs, through its :class:`~bench.peers.base.PeerClient`.

Phases, each on a fresh topic except that the consume phase reads what the produce phases wrote
(after an unmeasured warm-up: 16 producers for ``warmup_seconds`` on a topic of its own, so that
a JVM broker's JIT and every peer's caches are warm before the first measured send):

1. produce, 1 producer, one message per send, for ``phase_seconds``;
2. produce, 16 producers (asyncio tasks, one connection each), one message per send;
3. produce, 16 producers, batches of 32;
4. consume: one consumer group reads everything phases 1-3 wrote (count, MB/s); then, for
   peers whose client also pulls (lakemq, Apache RocketMQ), a pull consumer reads it again;
5. end-to-end latency at fixed rates (a light one, then the headline 5,000 msg/s), each on a
   fresh topic: the consumer is subscribed first and one unmeasured message goes end to end
   (so no peer pays for its consumer's start-up); sends are scheduled open-loop at the rate
   and each body carries its *scheduled* send time, so a server that cannot keep up is charged
   for the whole backlog (no coordinated omission), and the achieved send rate shows it. At
   most ``max_in_flight`` sends are outstanding; the phase is bounded by ``latency_seconds``
   plus a drain timeout, and messages that never arrive are counted as lost.

Around every phase the broker's CPU time is read from /proc (``cpu``): CPU per message is
the broker's own cost, whatever the client spent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench.peers.base import PeerClient

__all__ = [
    "FULL",
    "QUICK",
    "ConsumeResult",
    "LatencyResult",
    "PeerResult",
    "Plan",
    "ProduceResult",
    "describe_consume",
    "describe_latency",
    "describe_produce",
    "run_workload",
]

_STAMP = struct.Struct(">q")  # the scheduled send time, time.monotonic_ns(), first in the body
_WARM_UP = 0  # the stamp of the latency phase's first, unmeasured message
_WARM_UP_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Plan:
    phase_seconds: float
    latency_rates: tuple[int, ...]
    latency_seconds: float
    consume_timeout: float
    drain_timeout: float
    body_size: int = 1024
    batch_size: int = 32
    producer_counts: tuple[int, ...] = (1, 16)
    max_in_flight: int = 256
    warmup_seconds: float = 5.0
    smoke: bool = False  # a short run to check the harness, not to quote


FULL = Plan(phase_seconds=5.0, latency_rates=(500, 5000), latency_seconds=10.0, consume_timeout=25.0,
            drain_timeout=5.0)
QUICK = Plan(phase_seconds=1.5, latency_rates=(500, 5000), latency_seconds=2.0, consume_timeout=8.0,
             drain_timeout=3.0, warmup_seconds=1.0, smoke=True)


def _per_message_us(cpu_seconds: float, messages: int) -> float:
    return cpu_seconds / messages * 1e6 if messages > 0 else float("nan")


@dataclass(frozen=True, slots=True)
class ProduceResult:
    producers: int
    batch: int
    messages: int
    seconds: float
    cpu_seconds: float = 0.0  # the broker's, during the phase

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_msg(self) -> float:
        return _per_message_us(self.cpu_seconds, self.messages)


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    expected: int
    messages: int
    seconds: float
    mbytes: float
    cpu_seconds: float = 0.0

    @property
    def cpu_us_per_msg(self) -> float:
        return _per_message_us(self.cpu_seconds, self.messages)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.mbytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LatencyResult:
    rate: int  # the scheduled rate, msg/s
    sent: int
    received: int
    send_seconds: float  # from the first scheduled send until the last send was acked
    percentiles_ms: dict[str, float]  # "p50", "p90", "p99", "p99.9" -> milliseconds
    failed_sends: int = 0  # sends the peer refused or timed out (after the client's retries)
    first_error: str | None = None
    held_back: int = 0  # sends that waited for a free in-flight slot (the peer fell behind)
    cpu_seconds: float = 0.0

    @property
    def cpu_us_per_msg(self) -> float:
        return _per_message_us(self.cpu_seconds, self.received)

    @property
    def achieved_rate(self) -> float:
        return self.sent / self.send_seconds if self.send_seconds > 0 else 0.0

    @property
    def saturated(self) -> bool:
        """The peer did not keep up: acks lagged past the in-flight cap or the rate dropped,
        so the percentiles are mostly queueing time."""
        return self.held_back > 0 or self.achieved_rate < 0.95 * self.rate


@dataclass(slots=True)
class PeerResult:
    key: str
    title: str
    durability: str
    settings: str
    batch_note: str
    client: str = "python"
    produce: list[ProduceResult] = field(default_factory=list)
    consume: ConsumeResult | None = None
    pull: ConsumeResult | None = None  # the same messages read by a pull consumer, where the client has one
    latency: list[LatencyResult] = field(default_factory=list)
    error: str | None = None


def _body(size: int, stamp_ns: int) -> bytes:
    return _STAMP.pack(stamp_ns) + b"x" * (size - _STAMP.size)


async def _produce(client: PeerClient, topic: str, producers: int, batch: int,
                   plan: Plan, cpu: Callable[[], float]) -> ProduceResult:
    handles = [await client.producer(topic) for _ in range(producers)]
    counts = [0] * producers
    cpu_start = cpu()
    start = time.monotonic()
    deadline = start + plan.phase_seconds

    async def loop(index: int) -> None:
        handle = handles[index]
        while time.monotonic() < deadline:
            if batch == 1:
                await handle.send(_body(plan.body_size, time.monotonic_ns()))
                counts[index] += 1
            else:
                stamp = time.monotonic_ns()
                await handle.send_batch([_body(plan.body_size, stamp) for _ in range(batch)])
                counts[index] += batch

    try:
        await asyncio.gather(*(loop(i) for i in range(producers)))
        elapsed = time.monotonic() - start
        cpu_spent = cpu() - cpu_start
    finally:
        for handle in handles:
            await handle.close()
    return ProduceResult(producers, batch, sum(counts), elapsed, cpu_spent)


async def _consume(client: PeerClient, topic: str, expected: int, plan: Plan,
                   cpu: Callable[[], float], pull: bool = False) -> ConsumeResult | None:
    total_bytes = 0
    lock = threading.Lock()  # on_body may run on the client's threads

    def on_body(body: bytes) -> None:
        nonlocal total_bytes
        with lock:
            total_bytes += len(body)

    cpu_start = cpu()
    start = time.monotonic()
    if pull:
        got = await client.consume_pull(topic, expected, on_body, plan.consume_timeout)
        if got is None:
            return None
    else:
        got = await client.consume(topic, "bench-group", expected, on_body, plan.consume_timeout)
    elapsed = time.monotonic() - start
    return ConsumeResult(expected, got, elapsed, total_bytes / 1e6, cpu() - cpu_start)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


async def _latency(client: PeerClient, topic: str, rate: int, plan: Plan, cpu: Callable[[], float]) -> LatencyResult:
    total = int(rate * plan.latency_seconds)
    latencies_ms: list[float] = []
    subscribed = asyncio.Event()
    warmed = asyncio.Event()
    failed: list[BaseException] = []
    held_back = 0

    loop = asyncio.get_running_loop()

    def on_body(body: bytes) -> None:  # maybe on the client's threads: list.append is atomic
        stamp = _STAMP.unpack_from(body)[0]
        if stamp == _WARM_UP:
            loop.call_soon_threadsafe(warmed.set)
        else:
            latencies_ms.append((time.monotonic_ns() - stamp) / 1e6)

    # The consumer's own bound is only a backstop: it is cancelled once the drain ends.
    consumer = asyncio.create_task(client.consume(
        topic, "bench-latency", total + 1, on_body,
        2 * _WARM_UP_TIMEOUT + plan.latency_seconds + plan.drain_timeout, subscribed.set))
    handle = await client.producer(topic)
    in_flight = asyncio.Semaphore(plan.max_in_flight)
    sends: set[asyncio.Task[None]] = set()

    async def send(body: bytes) -> None:
        try:
            await handle.send(body)
        except Exception as exc:  # noqa: BLE001 - a failed send is a lost message, counted
            failed.append(exc)
        finally:
            in_flight.release()

    try:
        await _first(subscribed.wait(), consumer, "the latency consumer to subscribe")
        # One message end to end before the clock starts, so that no peer is charged for its
        # consumer's start-up (group join, rebalance, first fetch).
        await handle.send(_body(plan.body_size, _WARM_UP))
        await _first(warmed.wait(), consumer, "the warm-up message")
        cpu_start = cpu()
        start_ns = time.monotonic_ns() + 50_000_000
        interval_ns = 1e9 / rate
        for i in range(total):
            scheduled = start_ns + int(i * interval_ns)
            delay = (scheduled - time.monotonic_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            if in_flight.locked():
                held_back += 1
            await in_flight.acquire()
            task = asyncio.create_task(send(_body(plan.body_size, scheduled)))
            sends.add(task)
            task.add_done_callback(sends.discard)
        if sends:
            await asyncio.gather(*sends)
        send_seconds = (time.monotonic_ns() - start_ns) / 1e9
        expected = total - len(failed)
        drain_end = time.monotonic() + plan.drain_timeout
        while len(latencies_ms) < expected and time.monotonic() < drain_end and not consumer.done():
            await asyncio.sleep(0.02)
        cpu_spent = cpu() - cpu_start
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await handle.close()
    values = sorted(latencies_ms)
    percentiles = {name: _percentile(values, q)
                   for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9))}
    first_error = f"{type(failed[0]).__name__}: {failed[0]}" if failed else None
    return LatencyResult(rate, total, len(values), send_seconds, percentiles, len(failed), first_error,
                         held_back, cpu_spent)


async def _first(event_wait: Awaitable[object], consumer: asyncio.Task[int], what: str) -> None:
    """Wait for ``event_wait`` but fail fast when the consumer task ends (or errs) first."""
    waiter = asyncio.ensure_future(event_wait)
    done, _ = await asyncio.wait({waiter, consumer}, timeout=_WARM_UP_TIMEOUT,
                                 return_when=asyncio.FIRST_COMPLETED)
    if waiter in done:
        return
    waiter.cancel()
    if consumer in done:
        consumer.result()  # re-raises the consumer's error
        raise RuntimeError(f"the consumer stopped before {what}")
    raise TimeoutError(f"waited {_WARM_UP_TIMEOUT:.0f} s for {what}")


async def run_workload(client: PeerClient, result: PeerResult, plan: Plan, log=print,
                       cpu: Callable[[], float] = lambda: 0.0) -> None:
    """Run all phases, filling ``result`` as each finishes (so a late failure keeps the rest)."""
    stamp = time.strftime("%H%M%S")
    warm_topic = f"bench-warm-{stamp}"
    await client.create_topic(warm_topic)
    await _produce(client, warm_topic, max(plan.producer_counts), 1,
                   dataclasses.replace(plan, phase_seconds=plan.warmup_seconds), cpu)
    topic = f"bench-{stamp}"
    await client.create_topic(topic)
    runs = [(n, 1) for n in plan.producer_counts] + [(max(plan.producer_counts), plan.batch_size)]
    for producers, batch in runs:
        produced = await _produce(client, topic, producers, batch, plan, cpu)
        result.produce.append(produced)
        log(describe_produce(produced))
    expected = sum(p.messages for p in result.produce)
    result.consume = await _consume(client, topic, expected, plan, cpu)
    log(describe_consume(result.consume))
    result.pull = await _consume(client, topic, expected, plan, cpu, pull=True)
    if result.pull is not None:
        log(describe_consume(result.pull, "pull"))
    for rate in plan.latency_rates:
        latency_topic = f"bench-lat{rate}-{stamp}"
        await client.create_topic(latency_topic)
        measured = await _latency(client, latency_topic, rate, plan, cpu)
        result.latency.append(measured)
        log(describe_latency(measured))


def describe_produce(produced: ProduceResult) -> str:
    return (f"  produce {produced.producers:>2} producer(s) x batch {produced.batch:>2}: "
            f"{produced.rate:>9,.0f} msg/s ({produced.messages:,} in {produced.seconds:.1f} s; "
            f"broker CPU {produced.cpu_us_per_msg:.1f} us/msg)")


def describe_consume(consumed: ConsumeResult, how: str = "consume one group") -> str:
    return (f"  {how}: {consumed.messages:,}/{consumed.expected:,} at {consumed.rate:,.0f} msg/s, "
            f"{consumed.mb_per_s:.1f} MB/s (broker CPU {consumed.cpu_us_per_msg:.1f} us/msg)")


def describe_latency(measured: LatencyResult) -> str:
    failures = f" ({measured.failed_sends:,} sends failed: {measured.first_error})" if measured.failed_sends else ""
    saturated = ", saturated" if measured.saturated else ""
    return (f"  latency at {measured.rate:,} msg/s (achieved {measured.achieved_rate:,.0f}{saturated}): received "
            f"{measured.received:,}/{measured.sent:,}{failures}; "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in measured.percentiles_ms.items())
            + f"; broker CPU {measured.cpu_us_per_msg:.1f} us/msg")
