"""Apache RocketMQ 4.9.8's mqadmin (MQAdminStartup, rocketmq-tools) run against a real lakemq
NameServer and broker as a user runs it, while a Java producer and push consumer are online.

All commands run in one JVM, in order (tests/compat/mqadmin.py); each test checks one command's
printed output and, where it changes something, the broker's state through lakemq's own
admin client. docs/COMPATIBILITY.md lists the commands and what lakemq answers.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakemq.client.admin import Admin
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import UpdateConsumerOffsetRequestHeader, encode_header
from tests.cluster import Cluster, start_cluster
from tests.compat.java_client import JavaRun, LiveDriver, Scenario
from tests.compat.mqadmin import AdminOutput, run_mqadmin

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(400)]

TOPIC = "M_online_t"
CONSUMER = "G_M_online_c"
PRODUCER = "G_M_online_p"
OFFLINE = "G_M_offline"  # offsets committed, no consumer online
CREATED = "M_created"
NEW_GROUP = "M_group"


@dataclass
class AdminRun:
    outputs: dict[str, AdminOutput]
    online: JavaRun
    broker_addr: str
    after: dict[str, object]  # the broker's state seen through lakemq's Admin after the batch

    def __getitem__(self, name: str) -> AdminOutput:
        return self.outputs[name]


async def _offsets(ns: str, group: str, topic: str) -> dict[int, int]:
    async with Admin(ns) as admin:
        return {p.mq.queue_id: p.consumer_offset for p in await admin.consumer_progress(group, topic)}


async def _commit_offline_offsets(broker: str) -> None:
    """OFFLINE commits offsets 5 and 5: a group that consumed once and went away."""
    client = RemotingClient()
    try:
        for queue_id in (0, 1):
            header = UpdateConsumerOffsetRequestHeader(OFFLINE, TOPIC, queue_id, 5)
            answer = await client.invoke(broker, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)), 10.0)
            assert answer.code == ResponseCode.SUCCESS
    finally:
        await client.shutdown()


async def _state(ns: str, broker: str) -> dict[str, object]:
    async with Admin(ns) as admin:
        return {"topics": await admin.topic_configs(broker), "groups": await admin.subscription_groups(broker),
                "offline": {p.mq.queue_id: p.consumer_offset for p in await admin.consumer_progress(OFFLINE, TOPIC)}}


def _wait_offsets(ns: str, total: int) -> None:
    """Until the online consumer's offsets reached the broker (it persists every 500 ms)."""
    for _ in range(200):
        if sum(asyncio.run(_offsets(ns, CONSUMER, TOPIC)).values()) == total:
            return
        time.sleep(0.1)
    raise AssertionError(f"the online consumer's offsets never reached {total}")


@pytest.fixture(scope="module")
def admin_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminRun]:
    root = tmp_path_factory.mktemp("mqadmin")
    with start_cluster(root / "cluster") as cluster:
        yield _run(cluster, root)


def _run(cluster: Cluster, root: Path) -> AdminRun:
    ns, broker = cluster.namesrv_addr, cluster.broker_addr()
    release = root / "release"
    live = LiveDriver(ns, "M", ["online"], root / "java", release_file=str(release))
    try:
        online = live.wait_for("online", lambda s: bool(s.of("ready")))
        _wait_offsets(ns, 10)
        asyncio.run(_commit_offline_offsets(broker))
        sent = online.of("sent")[3]
        commands = {
            "clusterList": ["clusterList", "-n", ns],
            "updateTopic": ["updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", CREATED, "-r", "3", "-w", "3"],
            "topicList": ["topicList", "-n", ns],
            "topicRoute": ["topicRoute", "-n", ns, "-t", CREATED],
            "topicStatus": ["topicStatus", "-n", ns, "-t", TOPIC],
            "updateSubGroup": ["updateSubGroup", "-n", ns, "-b", broker, "-g", NEW_GROUP, "-q", "2", "-r", "3"],
            "consumerProgress": ["consumerProgress", "-n", ns, "-g", CONSUMER],
            "consumerConnection": ["consumerConnection", "-n", ns, "-g", CONSUMER],
            "producerConnection": ["producerConnection", "-n", ns, "-g", PRODUCER, "-t", TOPIC],
            "brokerStatus": ["brokerStatus", "-n", ns, "-b", broker],
            "queryMsgById": ["queryMsgById", "-n", ns, "-i", sent["offsetMsgId"]],
            "queryMsgByKey": ["queryMsgByKey", "-n", ns, "-t", TOPIC, "-k", "key-online-3"],
            "queryMsgByUniqueKey": ["queryMsgByUniqueKey", "-n", ns, "-t", TOPIC, "-i", sent["msgId"]],
            "getBrokerConfig": ["getBrokerConfig", "-n", ns, "-b", broker],
            "updateBrokerConfig": ["updateBrokerConfig", "-n", ns, "-b", broker, "-k", "transactionCheckMax",
                                   "-v", "7"],
            "getBrokerConfigAfter": ["getBrokerConfig", "-n", ns, "-b", broker],
            "updateBrokerConfigRefused": ["updateBrokerConfig", "-n", ns, "-b", broker, "-k", "brokerPermission",
                                          "-v", "4"],
            "resetOffsetByTime": ["resetOffsetByTime", "-n", ns, "-g", CONSUMER, "-t", TOPIC, "-s", "0"],
            "resetOffsetByTimeOffline": ["resetOffsetByTime", "-n", ns, "-g", OFFLINE, "-t", TOPIC, "-s", "0"],
            "deleteTopic": ["deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", CREATED],
            "topicListAfter": ["topicList", "-n", ns],
            "deleteSubGroup": ["deleteSubGroup", "-n", ns, "-b", broker, "-g", NEW_GROUP],
            # Not served: a clear refusal naming the request.
            "cleanUnusedTopic": ["cleanUnusedTopic", "-n", ns, "-b", broker],
            "wipeWritePerm": ["wipeWritePerm", "-n", ns, "-b", "broker-a"],
        }
        outputs = dict(zip(commands, run_mqadmin(list(commands.values()), root / "admin"), strict=True))
        # The reset told the online consumer (RESET_CONSUMER_CLIENT_OFFSET): it reads all 10 again.
        live.wait_for("online", lambda s: len(s.of("received")) >= 20, timeout=60)
        state = asyncio.run(_state(ns, broker))
        release.touch()
        return AdminRun(outputs, live.finish(), broker, state)
    finally:
        live.kill()


def ok(run: AdminRun, name: str) -> str:
    output = run[name]
    assert not output.failed, str(output)
    return output.stdout


def test_cluster_list_and_broker_status(admin_run: AdminRun) -> None:
    row = next(line for line in ok(admin_run, "clusterList").splitlines() if "broker-a" in line)
    assert row.split()[:4] == ["DefaultCluster", "broker-a", "0", admin_run.broker_addr]
    status = dict(re.findall(r"^(\w+)\s*: (.*)$", ok(admin_run, "brokerStatus"), re.MULTILINE))
    assert int(status["msgPutTotalTodayNow"]) >= 10 and int(status["msgGetTotalTodayNow"]) >= 10
    assert len(status["putTps"].split()) == 3 and int(status["commitLogMaxOffset"]) > 0
    assert status["brokerVersionDesc"].startswith("lakemq")


def test_topics_created_listed_routed_and_deleted(admin_run: AdminRun) -> None:
    assert "success" in ok(admin_run, "updateTopic")
    assert {TOPIC, CREATED} <= set(ok(admin_run, "topicList").split())
    assert '"readQueueNums":3' in ok(admin_run, "topicRoute").replace(" ", "")
    rows = [line.split() for line in ok(admin_run, "topicStatus").splitlines()[1:] if line.strip()]
    assert sorted(int(r[1]) for r in rows) == [0, 1] and sum(int(r[3]) for r in rows) == 10
    assert "success" in ok(admin_run, "deleteTopic")
    assert CREATED not in ok(admin_run, "topicListAfter").split()
    assert CREATED not in admin_run.after["topics"]  # type: ignore[operator]


def test_subscription_group_created_and_deleted(admin_run: AdminRun) -> None:
    assert "success" in ok(admin_run, "updateSubGroup")
    assert "success" in ok(admin_run, "deleteSubGroup").lower()
    assert NEW_GROUP not in admin_run.after["groups"]  # type: ignore[operator]


def test_consumer_progress_and_connections(admin_run: AdminRun) -> None:
    progress = ok(admin_run, "consumerProgress")
    assert progress.count(TOPIC) == 2 and "Diff Total: 0" in progress
    consumers = ok(admin_run, "consumerConnection")
    assert "online-c" in consumers and "CLUSTERING" in consumers and TOPIC in consumers
    assert "online-p" in ok(admin_run, "producerConnection")


def test_messages_found_by_id_key_and_unique_key(admin_run: AdminRun) -> None:
    sent = admin_run.online["online"].of("sent")[3]
    by_id = ok(admin_run, "queryMsgById")
    assert f"Topic:               {TOPIC}" in by_id and "key-online-3" in by_id
    assert re.search(rf"consumerGroup={CONSUMER}, trackType=CONSUMED\b", by_id), by_id
    assert sent["msgId"] in ok(admin_run, "queryMsgByKey")
    by_unique = ok(admin_run, "queryMsgByUniqueKey")
    assert sent["offsetMsgId"] in by_unique or sent["msgId"] in by_unique
    assert "key-online-3" in by_unique


def test_broker_config_read_and_changed_at_run_time(admin_run: AdminRun) -> None:
    before = dict(re.findall(r"^(\S+)\s+=\s+(.*)$", ok(admin_run, "getBrokerConfig"), re.MULTILINE))
    assert before["brokerName"] == "broker-a" and before["transactionCheckMax"] == "15"
    assert "update broker config success" in ok(admin_run, "updateBrokerConfig")
    after = dict(re.findall(r"^(\S+)\s+=\s+(.*)$", ok(admin_run, "getBrokerConfigAfter"), re.MULTILINE))
    assert after["transactionCheckMax"] == "7"
    refused = admin_run["updateBrokerConfigRefused"]
    assert refused.failed and "not supported by lakemq: brokerPermission" in refused.stderr


def test_reset_offset_by_time_online_and_offline(admin_run: AdminRun) -> None:
    assert "rollback consumer offset" in ok(admin_run, "resetOffsetByTime")
    online: Scenario = admin_run.online["online"]
    received = online.of("received")
    # Every message came again after the reset, none before it.
    assert sorted(r["queueOffset"] for r in received[10:]) == sorted(r["queueOffset"] for r in received[:10])
    # Offline: CONSUMER_NOT_ONLINE, and mqadmin committed the offsets itself.
    assert "rollback consumer offset" in ok(admin_run, "resetOffsetByTimeOffline")
    assert admin_run.after["offline"] == {0: 0, 1: 0}


def test_unserved_commands_are_refused_clearly(admin_run: AdminRun) -> None:
    broker, namesrv = admin_run["cleanUnusedTopic"], admin_run["wipeWritePerm"]
    assert broker.failed and "request code 316 (CLEAN_UNUSED_TOPIC) not supported by lakemq's broker" in broker.stderr
    assert "request code 205 (WIPE_WRITE_PERM_OF_BROKER) not supported by lakemq" in namesrv.stderr
