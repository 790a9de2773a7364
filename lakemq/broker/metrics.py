"""BrokerMetrics: the broker's hot-path Prometheus counters and histograms.

Every broker process owns one :class:`BrokerMetrics` with its own ``CollectorRegistry``
(never prometheus_client's global one: tests run several brokers in one interpreter). The
BrokerController creates it and hands it to the processors and services that record; state
gauges and counters kept elsewhere (CommitLog and ConsumeQueue sizes, dispatch lag, consumer
lag, delayed backlog, held pulls, pool rejections, transaction checks) are computed at scrape time by
:class:`lakemq.broker.metrics_collector.BrokerStateCollector`, so the hot path pays nothing
for them. TPS is ``rate()`` over the ``_total`` counters. docs/METRICS.md lists every metric.

Recording, from any thread::

    metrics.put_messages.labels(broker, topic).inc(n)
    metrics.put_latency_seconds.observe(seconds)
    metrics.record_flush(seconds, flushed_bytes)                 # the store's flush listener
    metrics.cold_reads.labels(broker, topic).inc()              # a pull served from the lake
    metrics.cold_read_latency_seconds.labels(broker, topic).observe(seconds)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["COLD_READ_BUCKETS", "LATENCY_BUCKETS", "BrokerMetrics"]

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
        self.put_messages = Counter(
            "lakemq_broker_put_messages", "Messages stored by sends (batch messages count one each).",
            ["broker", "topic"], registry=r)
        self.put_bytes = Counter(
            "lakemq_broker_put_bytes", "Body bytes of the messages stored by sends.",
            ["broker", "topic"], registry=r)
        self.get_messages = Counter(
            "lakemq_broker_get_messages", "Messages returned to pulls.",
            ["broker", "topic", "group"], registry=r)
        self.get_bytes = Counter(
            "lakemq_broker_get_bytes", "Bytes of the messages returned to pulls.",
            ["broker", "topic", "group"], registry=r)
        self.put_latency_seconds = Histogram(
            "lakemq_broker_put_latency_seconds", "Time to store one send request (one put or one batch).",
            ["broker"], buckets=LATENCY_BUCKETS, registry=r)
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

    def record_flush(self, seconds: float, flushed_bytes: int) -> None:
        """The store's flush listener (called on its flush thread)."""
        self.flush_latency_seconds.labels(self.broker).observe(seconds)
        self.flush_bytes.labels(self.broker).inc(flushed_bytes)
