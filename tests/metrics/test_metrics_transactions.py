"""Transaction ends counted by result, scraped from a real broker."""

from __future__ import annotations

from pathlib import Path

from lakemq.client import Message
from lakemq.client.config import ClientConfig
from lakemq.client.sync import SyncTransactionProducer
from tests.cluster import start_cluster
from tests.metrics.metrics_scrape import metrics_url, scrape, value
from tests.transaction.helpers import ScriptedListener, wait_until


def test_transaction_ends_by_result(tmp_path: Path) -> None:
    with start_cluster(tmp_path) as cluster:
        url = metrics_url(cluster.brokers["broker-a"])
        client = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="TxMetrics")
        with SyncTransactionProducer("TxMetrics", ScriptedListener(), client_config=client) as producer:
            producer.create_topic("TxMetricsTopic", 1)
            for body in (b"c0", b"c1", b"r0", b"u0"):
                producer.send_message_in_transaction(Message("TxMetricsTopic", body), arg=body)

        def ends(result: str) -> float:
            return value(scrape(url), "lakemq_broker_transaction_ends_total", broker="broker-a", result=result)

        # END_TRANSACTION is oneway: wait until the broker has taken all four.
        wait_until(lambda: ends("commit") + ends("rollback") + ends("unknown") == 4, timeout=10, what="four END_TRANSACTIONs")
        assert (ends("commit"), ends("rollback"), ends("unknown")) == (2, 1, 1)
