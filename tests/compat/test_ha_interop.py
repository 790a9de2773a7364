"""Replication across implementations (issue 17), with Apache RocketMQ's own broker from its
Maven jars: a lakemq slave follows a RocketMQ SYNC_MASTER, and a RocketMQ slave follows a
lakemq SYNC_MASTER. Every send is answered SEND_OK only once the other implementation's slave
acknowledged it, the slave syncs its master's topics, and both CommitLogs end identical byte
for byte. Both brokers use the same file sizes and register with one lakemq NameServer, from
which each slave learns its master's HA address."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from bench.jvm import RocketMQServer
from lakemq.client import Message, Producer, ProducerConfig, SendStatus
from lakemq.client.admin import Admin
from lakemq.launcher import SMALL_STORE
from tests.cluster import start_cluster
from tests.ha.ha_helpers import FAST_HA, assert_same_commit_logs, ha_errors

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(600)]

# 2 MiB CommitLog files: the stream crosses file ends (the blank record that seals a file).
FILES = {**{k: SMALL_STORE[k] for k in ("mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")},
         "mappedFileSizeCommitLog": str(2 << 20)}
# The sends go one at a time with no retry (each counted once), so a loaded machine must not
# turn a wait in the master's send queue past the default 200 ms into SYSTEM_BUSY (flow
# control is tests/semantics/test_flow_control.py's subject).
PATIENT = {"waitTimeMillsInSendQueue": "10000"}
# RocketMQ registers brokerIP2 (a non-loopback address unless set) as its HA address.
RMQ = {**FILES, **PATIENT, "brokerIP2": "127.0.0.1", "haSendHeartbeatInterval": "1000"}
TOPIC = "HaInterop"
MESSAGES = 2400  # about 4 MB with their sizes


async def _info(ns: str, addr: str) -> dict[str, str]:
    async with Admin(ns) as admin:
        return await admin.broker_runtime_info(addr)


async def _until(predicate: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.2)


async def _send_all(ns: str) -> list[SendStatus]:
    """Sends of mixed sizes (some compressed by the producer, some not); the first ones may
    be refused until the master sees its slave: retried until SEND_OK, then every one counts."""
    config = ProducerConfig(retry_times_when_send_failed=0)
    async with Producer("ha_interop_pg", namesrv_addr=ns, config=config) as producer:
        deadline = time.monotonic() + 60
        while (await producer.send(Message(TOPIC, b"first"))).send_status is not SendStatus.SEND_OK:
            assert time.monotonic() < deadline, "the master never had its slave"
            await asyncio.sleep(0.2)
        statuses = []
        for i in range(MESSAGES):
            body = os.urandom(200 + i % 5000) if i % 3 else b"z" * (5000 + i)
            msg = Message(TOPIC, body, properties={"i": str(i)})
            msg.tags, msg.keys = f"t{i % 4}", [f"k{i}"]
            statuses.append((await producer.send(msg)).send_status)
        return statuses


async def test_a_lakemq_slave_follows_a_rocketmq_master(tmp_path: Path) -> None:
    with start_cluster(tmp_path / "lakemq", brokers=()) as cluster:
        ns = cluster.namesrv_addr
        with RocketMQServer(tmp_path / "rmq", {**RMQ, "brokerRole": "SYNC_MASTER"}, broker_name="broker-a",
                            cluster="DefaultCluster", with_namesrv=False, namesrv_addr=ns) as rmq:
            async with Admin(ns) as admin:
                await admin.create_topic(TOPIC, queue_nums=4)
            cluster.add_broker("broker-a-s", {**FILES, **FAST_HA, "brokerName": "broker-a", "brokerRole": "SLAVE",
                                              "brokerId": "1"})
            slave = cluster.broker_addr("broker-a-s")

            async def connected() -> bool:
                return (await _info(ns, slave)).get("haConnected") == "true"

            await _until(connected, "the lakemq slave connected to RocketMQ's HA port")
            rmq_port = int(rmq.broker_addr.rpartition(":")[2])  # RocketMQ's HA port is always listenPort + 1
            assert (await _info(ns, slave))["haMasterAddress"] == f"127.0.0.1:{rmq_port + 1}"
            statuses = await _send_all(ns)
            assert set(statuses) == {SendStatus.SEND_OK}  # each acknowledged by the lakemq slave in time
            end = int((await _info(ns, rmq.broker_addr))["commitLogMaxOffset"])

            async def caught_up() -> bool:
                return int((await _info(ns, slave))["commitLogMaxOffset"]) == end

            await _until(caught_up, "the lakemq slave at RocketMQ's max offset")

            async def synced() -> bool:  # the master's topics, read from RocketMQ's fastjson
                async with Admin(ns) as admin:
                    return TOPIC in await admin.topic_configs(slave)

            await _until(synced, "RocketMQ's topic configs on the lakemq slave", timeout=30)
            assert cluster.stop_broker("broker-a-s") == 0
        names = assert_same_commit_logs(rmq.store_dir / "commitlog", cluster.root / "broker-a-s" / "store" / "commitlog")
        assert len(names) >= 2
        assert not ha_errors(cluster, "broker-a-s")


async def test_a_rocketmq_slave_follows_a_lakemq_master(tmp_path: Path) -> None:
    with start_cluster(tmp_path / "lakemq", brokers=()) as cluster:
        ns = cluster.namesrv_addr
        cluster.add_broker("broker-a", {**FILES, **FAST_HA, **PATIENT, "brokerRole": "SYNC_MASTER"})
        master = cluster.broker_addr("broker-a")
        async with Admin(ns) as admin:
            await admin.create_topic(TOPIC, queue_nums=4)
        with RocketMQServer(tmp_path / "rmq", {**RMQ, "brokerRole": "SLAVE", "brokerId": "1"}, broker_name="broker-a",
                            cluster="DefaultCluster", with_namesrv=False, namesrv_addr=ns) as rmq:

            async def connected() -> bool:
                return (await _info(ns, master)).get("haConnectedSlaves") == "1"

            await _until(connected, "RocketMQ's slave connected to the lakemq master")
            statuses = await _send_all(ns)
            assert set(statuses) == {SendStatus.SEND_OK}  # each acknowledged by RocketMQ's slave in time
            end = int((await _info(ns, master))["commitLogMaxOffset"])

            async def caught_up() -> bool:
                return int((await _info(ns, rmq.broker_addr))["commitLogMaxOffset"]) == end

            await _until(caught_up, "RocketMQ's slave at the lakemq master's max offset")

            async def synced() -> bool:  # RocketMQ's SlaveSynchronize reading lakemq's answers
                async with Admin(ns) as admin:
                    return TOPIC in await admin.topic_configs(rmq.broker_addr)

            await _until(synced, "the lakemq master's topic configs on RocketMQ's slave", timeout=30)
        assert cluster.stop_broker("broker-a") == 0
        names = assert_same_commit_logs(cluster.root / "broker-a" / "store" / "commitlog", rmq.store_dir / "commitlog")
        assert len(names) >= 2
        assert not ha_errors(cluster, "broker-a")
