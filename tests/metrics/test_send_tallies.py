"""SendTallies: the send path's counters and latency histogram without a lock per send. From
many threads nothing is lost, and a scrape reads exactly what prometheus_client's own Counter
and Histogram would expose for the same sends."""

from __future__ import annotations

import random
import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from lakemq.broker.metrics import LATENCY_BUCKETS, BrokerMetrics, SendTallies


def _exposition(registry: CollectorRegistry) -> tuple[list[str], float]:
    """The lines but _created (creation times) and _sum, sorted (label sets come in creation
    order); and the _sum, compared apart: floats added in another order round differently."""
    lines, total = [], 0.0
    for line in generate_latest(registry).decode().splitlines():
        if "_sum{" in line:
            total = float(line.rpartition(" ")[2])
        elif "_created" not in line:
            lines.append(line)
    return sorted(lines), total


def test_threads_lose_nothing_and_scrapes_match_prometheus_client() -> None:
    tallies = SendTallies("broker-a")
    mine = CollectorRegistry()
    mine.register(tallies)
    reference = CollectorRegistry()
    messages = Counter("lakemq_broker_put_messages", "Messages stored by sends (batch messages count one each).",
                       ["broker", "topic"], registry=reference)
    body = Counter("lakemq_broker_put_bytes", "Body bytes of the messages stored by sends.",
                   ["broker", "topic"], registry=reference)
    latency = Histogram("lakemq_broker_put_latency_seconds",
                        "Time to store one send request (one put or one batch).", ["broker"],
                        buckets=LATENCY_BUCKETS, registry=reference)
    rng = random.Random(7)
    # Exact bucket bounds included: a bound counts in its own bucket (le), as prometheus_client does.
    sends = [(rng.choice(["A", "B", "C"]), rng.randint(1, 32), rng.randint(0, 5000),
              rng.choice([*LATENCY_BUCKETS, 0.0, 7.5, rng.random() / 100])) for _ in range(40_000)]
    lock = threading.Lock()

    def work(part: list[tuple[str, int, int, float]]) -> None:
        for topic, n, size, seconds in part:
            tallies.record(topic, n, size, seconds)
            with lock:  # the reference, the locked way
                messages.labels("broker-a", topic).inc(n)
                body.labels("broker-a", topic).inc(size)
                latency.labels("broker-a").observe(seconds)

    threads = [threading.Thread(target=work, args=(sends[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (lines, total), (expected_lines, expected_total) = _exposition(mine), _exposition(reference)
    assert lines == expected_lines
    assert abs(total - expected_total) <= 1e-9 * expected_total


def test_the_broker_registry_exposes_the_tallies() -> None:
    metrics = BrokerMetrics("broker-b")
    metrics.sends.record("T", 3, 30, 0.0002)
    text = generate_latest(metrics.registry).decode()
    assert 'lakemq_broker_put_messages_total{broker="broker-b",topic="T"} 3.0' in text
    assert 'lakemq_broker_put_bytes_total{broker="broker-b",topic="T"} 30.0' in text
    assert 'lakemq_broker_put_latency_seconds_bucket{broker="broker-b",le="0.00025"} 1.0' in text
    assert 'lakemq_broker_put_latency_seconds_count{broker="broker-b"} 1.0' in text
