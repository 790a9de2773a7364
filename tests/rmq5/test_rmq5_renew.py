"""A 5.x PushConsumer whose listener takes longer than a delivery's invisible time: the broker
renews the delivery (auto_renew, as RocketMQ's proxy does) so it is consumed once, not again
while the listener still works. The renew slice is cut to 2 s (grpcRenewSliceMillis)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client.sync import SyncProducer
from lakemq.common.message import Message
from tests.cluster import Cluster
from tests.rmq5.rmq5 import grpc_cluster, rmq5_python, start_driver

pytestmark = pytest.mark.compat
SLICE_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("cluster"), grpc_port, grpcRenewSliceMillis=str(SLICE_MS),
                      grpcRenewAheadMillis="1000") as running:
        yield running


def test_a_slow_listener_keeps_its_delivery_until_it_acks(cluster: Cluster, grpc_port: int, tmp_path: Path) -> None:
    topic = "Rmq5Renew"
    with SyncProducer("grpc-renew-4x", namesrv_addr=cluster.namesrv_addr) as producer:
        producer.create_topic(topic, 2)
        producer.send(Message(topic, b"slow"))
        consumer = start_driver(rmq5_python(), f"127.0.0.1:{grpc_port}", topic, "consume", [],
                                tmp_path / "consume.log", group="Rmq5RenewGroup", slow={"slow": 3 * SLICE_MS / 1000})
        try:
            consumer.read_until("slept", 90)  # three slices in the listener
            producer.send(Message(topic, b"after"))  # consumed after any redelivery of "slow" would be
            deadline = time.monotonic() + 60
            assert consumer.process.stdout is not None
            while not any(x.get("body") == "after" for x in consumer.lines if x.get("event") == "consumed"):
                assert time.monotonic() < deadline, consumer.lines
                line = consumer.process.stdout.readline()
                if line.startswith("{"):
                    consumer.lines.append(json.loads(line))
        finally:
            consumer.finish()
    consumed = [(x["body"], x["attempt"]) for x in consumer.lines if x.get("event") == "consumed"]
    assert consumed == [("slow", 1), ("after", 1)], consumer.lines
