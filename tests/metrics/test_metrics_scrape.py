"""Prometheus metrics of a real NameServer and broker, scraped over HTTP as Prometheus would."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from lakemq.client import Message, SyncProducer, SyncPullConsumer
from tests.cluster import Cluster, start_cluster
from tests.metrics.metrics_scrape import Samples, metrics_url, scrape, value


def _scrape_until(url: str, done: Callable[[Samples], bool], timeout: float = 20.0) -> Samples:
    """The first scrape for which ``done`` holds; the last one when the timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if done(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # SYNC_FLUSH: every send waits for a group-commit flush, so the flush metrics move at once.
    conf = {"flushDiskType": "SYNC_FLUSH"}
    with start_cluster(tmp_path_factory.mktemp("metrics"), broker_conf=conf) as running:
        yield running


def test_broker_counts_puts_lag_delayed_backlog_and_timers(cluster: Cluster) -> None:
    url = metrics_url(cluster.brokers["broker-a"])
    topic, group = "MetricsTopic", "MetricsGroup"
    with SyncProducer("MetricsProducer", namesrv_addr=cluster.namesrv_addr) as producer:
        producer.create_topic(topic, 2)
        for i in range(10):
            producer.send(Message(topic, f"m{i:03d}".encode()))
        producer.send_batch([Message(topic, b"batch-1"), Message(topic, b"batch-2")])
        delayed = Message(topic, b"later")
        delayed.delay_time_level = 18  # 2 h with the default levels: stays in the backlog
        producer.send(delayed)
        producer.send(Message(topic, b"timer", properties={"TIMER_DELAY_SEC": "7200"}))  # waits 2 h

    # A send is answered once stored; the ConsumeQueues and the delay level fill when dispatch
    # has read it, a moment later.
    samples = _scrape_until(url, lambda s: value(s, "lakemq_broker_consumequeue_messages", topic=topic) == 12
                            and value(s, "lakemq_broker_delayed_backlog_messages", broker="broker-a", level="18") == 1
                            and value(s, "lakemq_broker_timer_waiting_messages", broker="broker-a") == 1)
    assert value(samples, "lakemq_broker_put_messages_total", broker="broker-a", topic=topic) == 14
    assert value(samples, "lakemq_broker_put_bytes_total", topic=topic) == 10 * 4 + 2 * 7 + 5 + 5
    assert value(samples, "lakemq_broker_put_latency_seconds_count", broker="broker-a") >= 12
    assert value(samples, "lakemq_broker_delayed_backlog_messages", broker="broker-a", level="18") == 1
    assert value(samples, "lakemq_broker_consumequeue_messages", topic=topic) == 12
    assert ("lakemq_broker_dispatch_lag_bytes", (("broker", "broker-a"),)) in samples
    assert value(samples, "lakemq_broker_commitlog_files") >= 1
    assert value(samples, "lakemq_broker_commitlog_bytes") > 0
    # Each acknowledged send was flushed first: the flushes cover every stored byte.
    assert value(samples, "lakemq_broker_flush_latency_seconds_count", broker="broker-a") >= 1
    assert value(samples, "lakemq_broker_flush_bytes_total", broker="broker-a") == value(
        samples, "lakemq_broker_commitlog_max_offset_bytes", broker="broker-a")

    # The group commits offset 0 everywhere: all 12 messages are its lag.
    with SyncPullConsumer(group, namesrv_addr=cluster.namesrv_addr) as consumer:
        queues = consumer.fetch_subscribe_message_queues(topic)
        for mq in queues:
            consumer.update_consume_offset(mq, 0)
    # The offset updates are oneway: the broker may read them just after the consumer closes.
    lag = "lakemq_broker_consumer_lag_messages"
    assert value(_scrape_until(url, lambda s: value(s, lag, group=group, topic=topic) == 12),
                 lag, group=group, topic=topic) == 12

    # Consuming everything and committing brings the lag to 0 on every queue.
    with SyncPullConsumer(group, namesrv_addr=cluster.namesrv_addr) as consumer:
        got = 0
        for mq in queues:
            result = consumer.pull(mq, "*", 0, 32)
            got += len(result.msgs)
            consumer.update_consume_offset(mq, result.next_begin_offset)
    assert got == 12

    def lags_of(samples: Samples) -> list[float]:
        return [v for (n, ls), v in samples.items() if n == lag and ("group", group) in ls]

    samples = _scrape_until(url, lambda s: set(lags_of(s)) == {0})
    lags = lags_of(samples)
    assert len(lags) == len(queues) and set(lags) == {0}
    assert value(samples, "lakemq_broker_get_messages_total", group=group, topic=topic) == 12
    # Whole stored records go out: more than the bodies.
    assert value(samples, "lakemq_broker_get_bytes_total", group=group) > 10 * 4 + 2 * 7
    for always in ("lakemq_broker_long_polling_holds", "lakemq_broker_transaction_checks_total",
                   "lakemq_broker_pool_rejections_total"):
        assert any(n == always for n, _ in samples), always


def test_namesrv_counts_brokers_and_route_requests(cluster: Cluster) -> None:
    assert cluster.namesrv is not None
    url = metrics_url(cluster.namesrv)
    with SyncProducer("RouteProducer", namesrv_addr=cluster.namesrv_addr) as producer:
        producer.create_topic("NamesrvMetricsTopic", 1)
        producer.send(Message("NamesrvMetricsTopic", b"x"))
    samples = scrape(url)
    assert value(samples, "lakemq_namesrv_live_brokers") == 1
    assert value(samples, "lakemq_namesrv_topics") >= 1
    assert value(samples, "lakemq_namesrv_registrations_total", result="SUCCESS") >= 1
    assert value(samples, "lakemq_namesrv_route_requests_total", result="found") >= 1
    assert value(samples, "lakemq_namesrv_request_latency_seconds_count", code="REGISTER_BROKER") >= 1
