"""The official C++ client (PyPI rocketmq 0.4.4) against a master/slave pair: its sends go to
the master and its consumers read what the slave replicated while the master is down; its
producer goes on through another broker group."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.client.admin import Admin
from tests.cluster import start_cluster
from tests.compat.cpp_client import CppClient
from tests.compat.test_cpp_client import unique
from tests.ha.ha_helpers import add_pair, wait_caught_up, wait_topic_on_slave
from tests.ha.test_failover_window import COUNT, kill_right_after_sends

pytest.importorskip("rocketmq.client")
pytestmark = [pytest.mark.compat, pytest.mark.timeout(300)]


async def test_cpp_client_reads_from_the_slave_while_the_master_is_down(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster)
        cluster.add_broker("broker-b")
        ns, topic = cluster.namesrv_addr, unique("CppPair")
        async with Admin(ns) as admin:
            assert sorted(await admin.create_topic(topic, queue_nums=2)) == ["broker-a", "broker-b"]
        cpp = CppClient(ns, tmp_path / "cpp")
        before = [{"topic": topic, "body": f"before-{i}", "tags": "t"} for i in range(40)]
        results = await cpp.produce(unique("cpp_pg"), before)
        assert {r["status"] for r in results} == {"OK"}
        await wait_caught_up(cluster)
        await wait_topic_on_slave(cluster, topic)  # a slave serves topics its master's config has
        got = await cpp.consume(unique("cpp_cg"), topic, expect=40)
        assert sorted(d.body for d in got) == sorted(m["body"] for m in before)

        cluster.kill_broker("broker-a")
        after = [{"topic": topic, "body": f"after-{i}", "tags": "t"} for i in range(20)]
        results = await cpp.produce(unique("cpp_pg"), after)
        assert {r["status"] for r in results} == {"OK"}  # through broker-b
        # A group that never consumed reads everything: broker-a's share from its slave.
        got = await cpp.consume(unique("cpp_cg"), topic, expect=60, timeout=90)
        assert sorted(d.body for d in got) == sorted(m["body"] for m in before + after)


async def test_cpp_client_reads_all_a_master_acknowledged_just_before_its_kill(tmp_path: Path) -> None:
    """No blind window: the topic was made a second before, the kill came 0.1 s after the
    last acknowledgement, and the slave serves it at once (docs/REPLICATION.md)."""
    with start_cluster(tmp_path, brokers=()) as cluster:
        topic = unique("CppBlind")
        await kill_right_after_sends(cluster, topic)
        got = await CppClient(cluster.namesrv_addr, tmp_path / "cpp").consume(unique("cpp_cg"), topic,
                                                                               expect=COUNT, timeout=90)
        assert sorted(d.body for d in got) == sorted(f"m-{i}" for i in range(COUNT))
