"""BrokerMetrics: the broker's hot-path Prometheus counters and histograms.

Every broker process owns one :class:`BrokerMetrics` with its own ``CollectorRegistry``
(never prometheus_client's global one: tests run several brokers in one interpreter). The
BrokerController creates it and hands it to the processors and services that record; state
gauges and counters kept elsewhere (CommitLog and ConsumeQueue sizes, dispatch lag, consumer
lag, delayed backlog, held pulls, pool rejections, transaction checks) are computed at scrape time by
:class:`lakemq.broker.metrics_collector.BrokerStateCollector`, so the hot path pays nothing
for them. TPS is ``rate()`` over the ``_total`` counters. docs/METRICS.md lists every metric.

Recording, from any thread::

    metrics.sends.record(topic, messages, body_bytes, seconds)   # a stored send (the hot path)
    metrics.gets.record(topic, group, messages, body_bytes)      # a pull's found messages
    metrics.record_flush(seconds, flushed_bytes)                 # the store's flush listener
    metrics.cold_reads.labels(broker, topic).inc()              # a pull served from the lake
    metrics.cold_read_latency_seconds.labels(broker, topic).observe(seconds)
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["COLD_READ_BUCKETS", "LATENCY_BUCKETS", "BrokerMetrics", "GetTallies", "SendTallies"]

# Put latency: 50 µs (page-cache append) to 5 s (a SYNC_FLUSH timeout).
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                   0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Lake reads go through Parquet and maybe object storage: milliseconds to tens of seconds.
COLD_READ_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    """One broker's counters and histograms; ``broker`` is its brokerName (every label set
    starts with it, so several brokers' scrapes can be merged)."""

    def __init__(self, broker: str, registry: CollectorRegistry | None = None) -> None:
        self.broker = broker
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sends = SendTallies(broker)
        r.register(self.sends)
        self.gets = GetTallies(broker)
        r.register(self.gets)
        self.flow_control_rejections = Counter(
            "lakemq_broker_flow_control_rejections",
            "Sends refused with SYSTEM_BUSY before queueing, by reason (page_cache_busy: a put held the "
            "CommitLog lock longer than osPageCacheBusyTimeoutMills).",
            ["broker", "reason"], registry=r)
        self.flush_latency_seconds = Histogram(
            "lakemq_broker_flush_latency_seconds",
            "Time of one CommitLog flush (msync) that wrote something: a group commit or a timed flush.",
            ["broker"], buckets=LATENCY_BUCKETS, registry=r)
        self.flush_bytes = Counter(
            "lakemq_broker_flush_bytes", "CommitLog bytes made durable by flushes.", ["broker"], registry=r)
        self.transaction_ends = Counter(
            "lakemq_broker_transaction_ends",
            "END_TRANSACTION requests accepted, by result (commit, rollback, unknown: the producer "
            "does not know yet and the check service will ask again).",
            ["broker", "result"], registry=r)
        self.cold_reads = Counter(
            "lakemq_broker_cold_reads", "Pulls served from the lake (messages no longer in the CommitLog).",
            ["broker", "topic"], registry=r)
        self.cold_read_latency_seconds = Histogram(
            "lakemq_broker_cold_read_latency_seconds", "Time to serve one pull from the lake.",
            ["broker", "topic"], buckets=COLD_READ_BUCKETS, registry=r)
        # The flush listener's series, bound once: a SYNC_FLUSH flush can be one per send.
        self._flush_latency = self.flush_latency_seconds.labels(broker)
        self._flush_bytes = self.flush_bytes.labels(broker)

    def record_flush(self, seconds: float, flushed_bytes: int) -> None:
        """The store's flush listener (called on its group-commit or flush thread, or by a
        flush watch's owner)."""
        self._flush_latency.observe(seconds)
        self._flush_bytes.inc(flushed_bytes)


# The buckets' ``le`` labels as prometheus_client writes them ("5e-05", ..., "+Inf").
_LATENCY_LE: tuple[str, ...] = tuple(map(floatToGoString, (*LATENCY_BUCKETS, float("inf"))))


class _Tally:
    """One thread's share: per topic [messages, body bytes], put-latency bucket counts (the
    last is +Inf) and their sum. Only its own thread writes it."""

    __slots__ = ("buckets", "latency_sum", "topics")

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0


class SendTallies(Collector):
    """lakemq_broker_put_messages, _put_bytes and _put_latency_seconds without a lock per send.

    prometheus_client's Counter.inc and Histogram.observe each take a lock (three per send,
    about a tenth of the event loop's CPU for a sync send). Here every thread adds to a tally
    of its own, so no update can be lost and none waits; a scrape sums the tallies."""

    def __init__(self, broker: str) -> None:
        self._broker = broker
        self._local = threading.local()
        self._tallies: list[_Tally] = []
        self._lock = threading.Lock()  # taken once per thread, when its tally is made

    def record(self, topic: str, messages: int, body_bytes: int, seconds: float) -> None:
        """A stored send request: ``messages`` of ``topic`` with ``body_bytes`` of bodies,
        stored in ``seconds``."""
        try:
            tally: _Tally = self._local.tally
        except AttributeError:
            tally = self._local.tally = _Tally()
            with self._lock:
                self._tallies.append(tally)
        counts = tally.topics.get(topic)
        if counts is None:
            counts = tally.topics[topic] = [0, 0]
        counts[0] += messages
        counts[1] += body_bytes
        tally.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # le: a bound counts its equal
        tally.latency_sum += seconds

    def total_messages(self) -> int:
        """Messages stored by sends since the broker started (all topics)."""
        with self._lock:
            tallies = list(self._tallies)
        return sum(counts[0] for tally in tallies for counts in list(tally.topics.values()))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            tallies = list(self._tallies)
        topics: dict[str, list[int]] = {}
        buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        latency_sum = 0.0
        for tally in tallies:
            for topic, (messages, body_bytes) in list(tally.topics.items()):  # a copy: its thread may add
                total = topics.setdefault(topic, [0, 0])
                total[0] += messages
                total[1] += body_bytes
            for i, n in enumerate(tally.buckets):
                buckets[i] += n
            latency_sum += tally.latency_sum
        put_messages = CounterMetricFamily(
            "lakemq_broker_put_messages", "Messages stored by sends (batch messages count one each).",
            labels=["broker", "topic"])
        put_bytes = CounterMetricFamily(
            "lakemq_broker_put_bytes", "Body bytes of the messages stored by sends.", labels=["broker", "topic"])
        for topic, (messages, body_bytes) in sorted(topics.items()):
            put_messages.add_metric([self._broker, topic], messages)
            put_bytes.add_metric([self._broker, topic], body_bytes)
        latency = HistogramMetricFamily(
            "lakemq_broker_put_latency_seconds", "Time to store one send request (one put or one batch).",
            labels=["broker"])
        cumulative, running = [], 0
        for le, n in zip(_LATENCY_LE, buckets, strict=True):
            running += n
            cumulative.append((le, running))
        latency.add_metric([self._broker], cumulative, latency_sum)
        yield from (put_messages, put_bytes, latency)


class GetTallies(Collector):
    """lakemq_broker_get_messages and _get_bytes, tallied per thread as SendTallies are (a
    labelled Counter's inc takes a lock and builds its label tuple: two per pull)."""

    def __init__(self, broker: str) -> None:
        self._broker = broker
        self._local = threading.local()
        self._tallies: list[dict[tuple[str, str], list[int]]] = []
        self._lock = threading.Lock()  # taken once per thread, when its tally is made

    def record(self, topic: str, group: str, messages: int, body_bytes: int) -> None:
        """A pull that returned ``messages`` of ``topic`` to ``group``, ``body_bytes`` in all."""
        try:
            tally: dict[tuple[str, str], list[int]] = self._local.tally
        except AttributeError:
            tally = self._local.tally = {}
            with self._lock:
                self._tallies.append(tally)
        counts = tally.get((topic, group))
        if counts is None:
            counts = tally[(topic, group)] = [0, 0]
        counts[0] += messages
        counts[1] += body_bytes

    def _sums(self) -> dict[tuple[str, str], list[int]]:
        with self._lock:
            tallies = list(self._tallies)
        sums: dict[tuple[str, str], list[int]] = {}
        for tally in tallies:
            for key, (messages, body_bytes) in list(tally.items()):  # a copy: its thread may add
                total = sums.setdefault(key, [0, 0])
                total[0] += messages
                total[1] += body_bytes
        return sums

    def total_messages(self) -> int:
        """Messages returned to pulls since the broker started."""
        return sum(messages for messages, _ in self._sums().values())

    def collect(self) -> Iterator[Metric]:
        get_messages = CounterMetricFamily("lakemq_broker_get_messages", "Messages returned to pulls.",
                                           labels=["broker", "topic", "group"])
        get_bytes = CounterMetricFamily("lakemq_broker_get_bytes", "Bytes of the messages returned to pulls.",
                                        labels=["broker", "topic", "group"])
        for (topic, group), (messages, body_bytes) in sorted(self._sums().items()):
            get_messages.add_metric([self._broker, topic, group], messages)
            get_bytes.add_metric([self._broker, topic, group], body_bytes)
        yield from (get_messages, get_bytes)
