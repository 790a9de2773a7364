"""The tiering lag a broker with a lakeUri reports before anything reached the lake."""

from __future__ import annotations

import time
from pathlib import Path

from lakemq.client import Message, SyncProducer
from tests.cluster import start_cluster
from tests.metrics.metrics_scrape import metrics_url, scrape, value


def test_everything_is_lag_while_the_lake_is_empty(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    with start_cluster(tmp_path, broker_conf={"lakeUri": str(lake)}) as cluster:
        url = metrics_url(cluster.brokers["broker-a"])
        with SyncProducer("TieringLagProducer", namesrv_addr=cluster.namesrv_addr) as producer:
            producer.send(Message("TieringLagTopic", b"not in the lake yet"))
        # The lag is probed in the background: wait until it has seen the message, a second old.
        deadline = time.monotonic() + 10
        while True:
            samples = scrape(url)
            max_offset = value(samples, "lakemq_broker_commitlog_max_offset_bytes", broker="broker-a")
            lag = value(samples, "lakemq_broker_tiering_lag_bytes", broker="broker-a")
            lag_s = value(samples, "lakemq_broker_tiering_lag_seconds", broker="broker-a")
            if (max_offset > 0 and lag == max_offset and lag_s >= 1.0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert max_offset > 0
    assert lag == max_offset
    assert value(samples, "lakemq_broker_tiering_committed_offset_bytes", broker="broker-a") == 0
    assert lag_s >= 1.0


def test_no_tiering_metrics_without_a_lake(tmp_path: Path) -> None:
    with start_cluster(tmp_path) as cluster:
        samples = scrape(metrics_url(cluster.brokers["broker-a"]))
    assert not any(name.startswith("lakemq_broker_tiering_") for name, _ in samples)
    assert ("lakemq_broker_commitlog_files", (("broker", "broker-a"),)) in samples
