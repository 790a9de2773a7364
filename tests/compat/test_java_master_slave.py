"""Apache RocketMQ's Java client (4.9.8) against a lakemq master/slave pair: what its producer
had acknowledged by a SYNC_MASTER is read by its push consumer from the slave while the
master is down, and its producer goes on through the other broker group."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.client.admin import Admin
from tests.cluster import start_cluster
from tests.compat.java_client import run_driver
from tests.ha.ha_helpers import add_pair, wait_topic_on_slave
from tests.ha.test_failover_window import COUNT, kill_right_after_sends

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(300)]

TOPIC = "JavaPair"


async def test_java_client_reads_from_the_slave_while_the_master_is_down(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster, role="SYNC_MASTER")
        cluster.add_broker("broker-b")
        ns = cluster.namesrv_addr
        async with Admin(ns) as admin:
            assert sorted(await admin.create_topic(TOPIC, queue_nums=2)) == ["broker-a", "broker-b"]

        first = run_driver(ns, "JP1", ["sendto"], tmp_path / "java-before", topic=TOPIC, count="40",
                           label="before")
        before = first["sendto"].of("sent")
        assert [e["status"] for e in before] == ["SEND_OK"] * 40  # on broker-a: on its slave too
        assert {e["brokerName"] for e in before} == {"broker-a", "broker-b"}
        await wait_topic_on_slave(cluster, TOPIC)  # a slave serves the topics its master's config has

        cluster.kill_broker("broker-a")
        # One JVM: a producer that can only go to broker-b, and a new group that reads the whole
        # topic, broker-a's share from its slave.
        second = run_driver(ns, "JP2", ["sendto", "readall"], tmp_path / "java-after", topic=TOPIC, count="20",
                            label="after", topics=TOPIC, expect="60", group="G_JavaPair_reader")
        after = second["sendto"].of("sent")
        assert [e["status"] for e in after] == ["SEND_OK"] * 20
        assert {e["brokerName"] for e in after} == {"broker-b"}
        got = second["readall"].of("received")
        sent = {e["msgId"]: e for e in before + after}
        assert sorted(e["msgId"] for e in got) == sorted(sent)  # every message, once
        for e in got:
            assert e.body == sent[e["msgId"]].body and e["keys"] == sent[e["msgId"]]["keys"]


async def test_java_client_reads_all_a_master_acknowledged_just_before_its_kill(tmp_path: Path) -> None:
    """No blind window: the topic was made a second before, the kill came 0.1 s after the
    last acknowledgement, and the slave serves it at once (docs/REPLICATION.md)."""
    with start_cluster(tmp_path, brokers=()) as cluster:
        sent = await kill_right_after_sends(cluster, "JavaBlind")
        run = run_driver(cluster.namesrv_addr, "JB", ["readall"], tmp_path / "java", topics="JavaBlind",
                         expect=str(COUNT), group="G_JavaBlind")
        got = run["readall"].of("received")
        assert sorted({e["msgId"] for e in got}) == sorted(sent)
