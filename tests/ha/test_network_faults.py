"""Replication over a link the test breaks: the slave runs on a second test host (a network
namespace behind a veth pair, tests/ha/netns.py); the test partitions the link or slows it
to a few Mbit/s while producers keep sending to the master."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakemq.client import Message, Producer, SendStatus
from lakemq.client.admin import Admin
from tests.client.client_helpers import unique
from tests.cluster import Cluster, start_cluster
from tests.ha import netns
from tests.ha.ha_helpers import FAST_HA, assert_same_commit_logs, commit_log_dir, ha_errors, runtime, wait_for

pytestmark = pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "-")

SLAVE = "broker-a-s"


@dataclass
class Link:
    cluster: Cluster
    host: netns.TestHost

    @property
    def ns(self) -> str:
        return self.cluster.namesrv_addr

    async def master_view(self) -> tuple[int, int, float]:
        """(slaves connected, bytes the slave lacks, age in s of the oldest byte it lacks)."""
        info = await runtime(self.cluster.broker_addr("broker-a"), self.ns)
        return (int(info["haConnectedSlaves"]), int(info["slaveFallBehindBytes"]),
                float(info.get("haSlave0LagSeconds", "0")))


def start_pair_across(cluster: Cluster, host: netns.TestHost, role: str, **master_conf: str) -> None:
    """broker-a here, listening for slaves on the veth; its slave on the other host. The
    NameServer is on this host's loopback, out of the slave's reach: it is given its master."""
    cluster.add_broker("broker-a", {**FAST_HA, "brokerRole": role, "brokerIP2": host.host_ip, **master_conf})
    ha_addr = f"{host.host_ip}:{cluster.brokers['broker-a'].port + 1}"
    cluster.add_broker(SLAVE, {**FAST_HA, "brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "1",
                               "brokerIP1": host.ns_ip, "haMasterAddress": ha_addr}, prefix=host.prefix)


@pytest.fixture
def link(tmp_path: Path) -> Iterator[Link]:
    with netns.test_host() as host, start_cluster(tmp_path, brokers=()) as cluster:
        start_pair_across(cluster, host, "ASYNC_MASTER")
        yield Link(cluster, host)


async def _send(producer: Producer, topic: str, n: int, size: int = 1000) -> list[float]:
    """Send ``n`` messages one after another; every one must be SEND_OK. Their latencies."""
    latencies = []
    for i in range(n):
        started = time.monotonic()
        result = await producer.send(Message(topic, b"%d-" % i + b"n" * size))
        latencies.append(time.monotonic() - started)
        assert result.send_status is SendStatus.SEND_OK
    return latencies


async def test_async_master_serves_through_a_partition_and_a_slow_link(link: Link) -> None:
    topic = unique("Partitioned")
    async with Admin(link.ns) as admin:
        await admin.create_topic(topic, queue_nums=4)
    async with Producer(unique("pg"), namesrv_addr=link.ns) as producer:
        await _send(producer, topic, 200)
        await wait_for_view(link, lambda v: v[0] == 1 and v[1] == 0, "the slave caught up")

        link.host.partition()
        during = await _send(producer, topic, 300)
        assert max(during) < 1.0  # the master does not wait for its slave
        _, behind, _ = await link.master_view()
        assert behind >= 300 * 1000
        # The master closes the silent link (haHousekeepingInterval, 4 s here); lag keeps its age.
        await wait_for_view(link, lambda v: v[0] == 0, "the master dropping the link", timeout=15)
        link.host.heal()
        await wait_for_view(link, lambda v: v[0] == 1 and v[1] == 0, "the slave back and caught up", timeout=30)

        link.host.limit("8mbit")  # 1 MB/s
        try:
            sent = time.monotonic()
            during = await _send(producer, topic, 3000)  # 3 MB in well under the 3 s the link needs
            seen: list[tuple[int, int, float]] = []
            await wait_for_view(link, lambda v: seen.append(v) or v[1] == 0, "catching up over the slow link",
                                timeout=60)
            caught_up = time.monotonic() - sent
        finally:
            link.host.unlimit()
        assert max(v[1] for v in seen) > 500_000  # the slave fell behind
        assert max(v[2] for v in seen) > 0.5  # and the lag had an age
        assert caught_up > 2.0  # the link, not the master, set the pace
    link.cluster.stop_broker("broker-a")
    link.cluster.stop_broker(SLAVE)
    assert_same_commit_logs(commit_log_dir(link.cluster, "broker-a"), commit_log_dir(link.cluster, SLAVE))
    errors = ha_errors(link.cluster, "broker-a", SLAVE)
    assert not errors, errors


async def wait_for_view(link: Link, predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        view = await link.master_view()
        if predicate(view):  # type: ignore[operator]
            return
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}: {view}"
        await asyncio.sleep(0.1)


_ = wait_for  # the generic helper, for tests below that wait on other things
