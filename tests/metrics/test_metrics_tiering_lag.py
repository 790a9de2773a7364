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
        time.sleep(1.1)
        samples = scrape(url)
    max_offset = value(samples, "lakemq_broker_commitlog_max_offset_bytes", broker="broker-a")
    assert max_offset > 0
    assert value(samples, "lakemq_broker_tiering_lag_bytes", broker="broker-a") == max_offset
    assert value(samples, "lakemq_broker_tiering_committed_offset_bytes", broker="broker-a") == 0
    assert value(samples, "lakemq_broker_tiering_lag_seconds", broker="broker-a") >= 1.0


def test_no_tiering_metrics_without_a_lake(tmp_path: Path) -> None:
    with start_cluster(tmp_path) as cluster:
        samples = scrape(metrics_url(cluster.brokers["broker-a"]))
    assert not any(name.startswith("lakemq_broker_tiering_") for name, _ in samples)
    assert ("lakemq_broker_commitlog_files", (("broker", "broker-a"),)) in samples
