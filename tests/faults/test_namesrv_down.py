"""NameServer down: producers and consumers keep working on the routes they cached.

The NameServer is killed with SIGKILL while a producer and a push consumer are running; sends
go on and every one of them is consumed, because clients route from their cached TopicRouteData
and talk to the broker directly. A restart of the broker meanwhile does not strand them either:
it comes back on the same address."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    SyncProducer,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from tests.cluster import start_cluster

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow

TOPIC = "NoNamesrv"


def test_clients_keep_working_on_cached_routes(tmp_path: Path) -> None:
    with start_cluster(tmp_path, broker_conf={"accessMessageInMemoryMaxRatio": "0"}) as cluster:
        ns = cluster.namesrv_addr
        got: set[bytes] = set()
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
            with lock:
                got.update(m.body for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = SyncPushConsumer(
            "NoNamesrvGroup",
            config=ConsumerConfig(consumer_group="NoNamesrvGroup",
                                  consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
            client_config=ClientConfig(namesrv_addr=ns, instance_name="nons", poll_name_server_interval=500,
                                       rebalance_interval=1000),
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_message_listener_concurrently(listener)
        producer = SyncProducer("NoNamesrvProducer",
                                client_config=ClientConfig(namesrv_addr=ns, instance_name="nonsp",
                                                           poll_name_server_interval=500))
        producer.start()
        try:
            producer.create_topic(TOPIC, 2)
            for i in range(20):
                producer.send(Message(TOPIC, f"before-{i}".encode()))
            consumer.start()
            _wait(lambda: len(got) >= 20, "the first 20")

            assert cluster.namesrv is not None
            cluster.namesrv.kill()
            time.sleep(1.5)  # several failed route refreshes: the cached routes must survive them
            for i in range(20):
                producer.send(Message(TOPIC, f"after-{i}".encode()))
            _wait(lambda: len(got) >= 40, "20 sent after the NameServer died")

            cluster.restart_broker()  # same address; still no NameServer to ask
            sent_after_restart = 0
            deadline = time.monotonic() + 20
            while sent_after_restart < 10 and time.monotonic() < deadline:
                try:
                    producer.send(Message(TOPIC, f"restart-{sent_after_restart}".encode()))
                    sent_after_restart += 1
                except Exception:  # noqa: BLE001 - any failure until the reconnect
                    time.sleep(0.2)  # the reconnect to the restarted broker
            assert sent_after_restart == 10
            _wait(lambda: len(got) >= 50, "10 sent after the broker restart")
        finally:
            consumer.shutdown()
            producer.shutdown()
        print(f"injected: SIGKILL of the NameServer, then a broker restart; measured: {len(got)} of 50 consumed")
        assert got == {f"{p}-{i}".encode() for p, n in (("before", 20), ("after", 20), ("restart", 10))
                       for i in range(n)}


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
