"""Master/slave pairs of real broker processes for the replication tests, and the checks
they share: what a broker's runtime info says, and CommitLogs compared byte for byte."""

from __future__ import annotations

import asyncio
import filecmp
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from lakemq.client.admin import Admin
from lakemq.common.record import MESSAGE_MAGIC_CODE, decode_record
from tests.cluster import Cluster

# Short HA intervals so links are noticed dead and re-made within a test's patience.
FAST_HA = {
    "haSendHeartbeatInterval": "1000",
    "haHousekeepingInterval": "4000",
    "registerNameServerPeriod": "2000",
}


def slave_name(master: str) -> str:
    return f"{master}-s"


def add_pair(cluster: Cluster, master: str = "broker-a", *, role: str = "ASYNC_MASTER",
             master_conf: Mapping[str, str] | None = None, slave_conf: Mapping[str, str] | None = None) -> None:
    """``master`` (brokerId 0) and its slave (brokerId 1, launcher name ``{master}-s``); the
    slave learns its master's HA address from the NameServer."""
    cluster.add_broker(master, {**FAST_HA, "brokerRole": role, **(master_conf or {})})
    cluster.add_broker(slave_name(master), {**FAST_HA, "brokerName": master, "brokerRole": "SLAVE",
                                            "brokerId": "1", **(slave_conf or {})})


async def runtime(addr: str, namesrv: str) -> dict[str, str]:
    async with Admin(namesrv) as admin:
        return await admin.broker_runtime_info(addr)


async def max_offset(addr: str, namesrv: str) -> int:
    return int((await runtime(addr, namesrv))["commitLogMaxOffset"])


async def wait_caught_up(cluster: Cluster, master: str = "broker-a", timeout: float = 30.0) -> int:
    """Until the slave's CommitLog ends where the master's does; returns that offset."""
    ns = cluster.namesrv_addr
    deadline = time.monotonic() + timeout
    while True:
        want = await max_offset(cluster.broker_addr(master), ns)
        have = await max_offset(cluster.broker_addr(slave_name(master)), ns)
        if have == want:
            return have
        assert time.monotonic() < deadline, f"slave at {have}, master at {want} after {timeout}s"
        await asyncio.sleep(0.1)


async def wait_for(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.1)


def commit_log_dir(cluster: Cluster, name: str) -> Path:
    return cluster.root / name / "store" / "commitlog"


def assert_same_commit_logs(master_dir: Path, slave_dir: Path) -> list[str]:
    """Every file of the slave's CommitLog is the master's, byte for byte (the master may
    have more only if it ran ahead); returns the file names."""
    names = sorted(p.name for p in master_dir.iterdir())
    assert names and names == sorted(p.name for p in slave_dir.iterdir())
    for name in names:
        assert filecmp.cmp(master_dir / name, slave_dir / name, shallow=False), f"{name} differs"
    return names


def unique_keys(commit_log: Path) -> Iterator[str]:
    """The UNIQ_KEY of every message record in a CommitLog directory, read from the files
    (live files too: what a broker wrote is in the page cache), file by file up to the
    first place that holds no record."""
    for path in sorted(commit_log.iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = int.from_bytes(data[pos:pos + 4], "big"), int.from_bytes(data[pos + 4:pos + 8], "big")
            if magic != MESSAGE_MAGIC_CODE or size <= 0 or pos + size > len(data):
                break
            key = decode_record(data, pos, read_body=False).unique_key
            if key:
                yield key
            pos += size


def ha_errors(cluster: Cluster, *names: str) -> list[str]:
    """ERROR lines the replication code logged in these brokers' logs (a dropped link, a
    refused transfer): a healthy run has none, even when it heals itself."""
    lines = []
    for name in names:
        for path in (cluster.root / name / "logs").glob("*.log"):
            lines += [line for line in path.read_text(errors="replace").splitlines()
                      if " ERROR " in line and "lakemq.broker.ha" in line]
    return lines


async def wait_topic_on_slave(cluster: Cluster, topic: str, master: str = "broker-a") -> None:
    """Until the slave's periodic sync (every 10 s) has brought it the topic's config."""
    async with Admin(cluster.namesrv_addr) as admin:
        slave = cluster.broker_addr(slave_name(master))
        deadline = time.monotonic() + 30
        while topic not in await admin.topic_configs(slave):
            assert time.monotonic() < deadline, f"{topic} did not reach the slave"
            await asyncio.sleep(0.2)
