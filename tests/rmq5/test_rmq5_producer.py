"""The official RocketMQ 5 Python client (rocketmq-python-client 5.1.2, gRPC) sends to a real
lakemq broker through its gRPC front door, and lakemq's 4.x client reads what it sent."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakemq.client.sync import SyncProducer
from lakemq.common.message import MessageConst
from tests.cluster import Cluster
from tests.rmq5.rmq5 import grpc_cluster, pull_all, start_driver, wait_for_bodies

pytestmark = pytest.mark.compat
TX_CONF = {"transactionCheckInterval": "500", "transactionTimeOut": "1000", "transactionCheckMax": "15"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("cluster"), grpc_port, **TX_CONF) as running:
        yield running


def _topic(cluster: Cluster, name: str, queues: int = 4) -> str:
    with SyncProducer("grpc-test-admin", namesrv_addr=cluster.namesrv_addr) as admin:
        admin.create_topic(name, queues)
    return name


def test_normal_fifo_and_delayed_sends_reach_4x_consumers_intact(python: str, cluster: Cluster, grpc_port: int,
                                                                 tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5Send")
    deliver_at = int(time.time()) + 2
    messages = [
        {"body": f"n{i}", "tag": "TagA", "keys": [f"k{i}"], "properties": {"color": "red", "n": str(i)}}
        for i in range(3)
    ] + [{"body": f"f{i}", "tag": "TagF", "group": "order-7"} for i in range(5)] + [
        {"body": "d0", "deliver_at_s": deliver_at}]
    driver = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "send", messages, tmp_path / "driver.log")
    try:
        sent = [line for line in driver.read_until("done", 90) if line.get("event") == "sent"]
    finally:
        driver.finish()
    assert len(sent) == len(messages), driver.lines
    ids = [line["message_id"] for line in sent]
    found = wait_for_bodies(cluster.namesrv_addr, topic, "grpc-reader", {m["body"].encode() for m in messages}, 30)
    by_body = {m.body: m for m in found}
    assert Counter(m.body for m in found) == Counter(m["body"].encode() for m in messages)
    for i in range(3):
        msg = by_body[f"n{i}".encode()]
        assert msg.tags == "TagA" and msg.keys == [f"k{i}"]
        assert msg.properties["color"] == "red" and msg.properties["n"] == str(i)
        assert msg.unique_key == ids[i]  # the 5.x client's message id is the 4.x UNIQ_KEY
    fifo = [by_body[f"f{i}".encode()] for i in range(5)]
    assert {m.properties[MessageConst.SHARDING_KEY] for m in fifo} == {"order-7"}
    assert len({m.queue_id for m in fifo}) == 1  # one message group, one queue, in send order
    assert [m.queue_offset for m in fifo] == sorted(m.queue_offset for m in fifo)
    assert by_body[b"d0"].properties["TIMER_DELIVER_MS"] == str(deliver_at * 1000)


def test_transactions_commit_rollback_and_check_back_over_telemetry(python: str, cluster: Cluster,
                                                                    grpc_port: int, tmp_path: Path) -> None:
    topic = _topic(cluster, "Rmq5Tx")
    messages = [{"body": "c0", "decision": "commit"}, {"body": "r0", "decision": "rollback"},
                {"body": "u0"}]
    driver = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "transaction", messages, tmp_path / "driver.log",
                          check="commit")
    try:
        driver.read_until("done", 90)
        sent = [line for line in driver.lines if line.get("event") == "sent"]
        assert len(sent) == 3 and all(line["transaction_id"] for line in sent), driver.lines
        # The unresolved one is checked back over the producer's Telemetry stream and committed.
        checks = [line for line in driver.read_until("check", 60) if line.get("event") == "check"]
        assert checks[0]["body"] == "u0" and checks[0]["message_id"] == sent[2]["message_id"]
        found = wait_for_bodies(cluster.namesrv_addr, topic, "grpc-tx-reader", {b"c0", b"u0"}, 30)
    finally:
        driver.finish()
    assert Counter(m.body for m in found) == Counter({b"c0": 1, b"u0": 1})
    # A second look, after more check passes: the rollback stays invisible, nothing doubles.
    time.sleep(1.5)
    assert Counter(m.body for m in pull_all(cluster.namesrv_addr, topic, "grpc-tx-reader")) == \
        Counter({b"c0": 1, b"u0": 1})


def test_push_consumer_starts_with_the_settings_the_broker_gives(python: str, cluster: Cluster, grpc_port: int,
                                                                tmp_path: Path) -> None:
    """The 5.x PushConsumer will not start without the Settings exchange; it gets the broker's
    long-polling timeout (maxSuspendTimeoutMillis) and the group's FIFO flag."""
    topic = _topic(cluster, "Rmq5Push")
    driver = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "push", [], tmp_path / "driver.log",
                          group="Rmq5PushGroup")
    try:
        [started] = [line for line in driver.read_until("started", 60) if line.get("event") == "started"]
    finally:
        driver.finish()
    assert started == {"event": "started", "fifo": False, "long_polling_timeout_s": 20}


def test_a_timed_message_is_recalled_before_it_is_due(python: str, cluster: Cluster, grpc_port: int,
                                                      tmp_path: Path) -> None:
    """RecallMessage with the handle the timed send answered: the message is never delivered,
    a second recall says it was recalled already; its twin, not recalled, is delivered."""
    topic = _topic(cluster, "Rmq5Recall")
    deliver_at = int(time.time()) + 3
    messages: list[dict[str, Any]] = [{"body": "recalled", "deliver_at_s": deliver_at, "recalls": 2},
                                      {"body": "kept", "deliver_at_s": deliver_at}, {"body": "plain"}]
    driver = start_driver(python, f"127.0.0.1:{grpc_port}", topic, "send", messages, tmp_path / "driver.log")
    try:
        lines = driver.read_until("done", 90)
    finally:
        driver.finish()
    sent = [line for line in lines if line.get("event") == "sent"]
    assert sent[0]["recall_handle"] and sent[1]["recall_handle"] and not sent[2]["recall_handle"], lines
    recalls = [line for line in lines if line.get("event") in ("recalled", "error")]
    assert recalls[0] == {"event": "recalled", "message_id": sent[0]["message_id"]}, lines
    assert recalls[1]["event"] == "error" and "already recalled" in recalls[1]["error"], lines
    found = wait_for_bodies(cluster.namesrv_addr, topic, "grpc-recall-reader", {b"kept", b"plain"}, 30)
    assert sorted(m.body for m in found) == [b"kept", b"plain"]
