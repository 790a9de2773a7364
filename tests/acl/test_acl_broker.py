"""ACL 1.0 end to end: a real broker process with aclEnable=true, lakemq's clients and the
official C++ client; and a default broker, where ACL is off and credentials are ignored."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from lakemq.client.admin import Admin
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import NoPermissionError
from lakemq.remoting import RemotingCommand
from lakemq.remoting.client import RemotingClientConfig
from lakemq.remoting.sync import SyncRemotingClient
from tests.cluster import Cluster, start_cluster

USER, USER_SECRET = "lakemqUser", "userSecret1"
ADMIN, ADMIN_SECRET = "lakemqAdmin", "adminSecret1"
ACL_FILE = f"""
accounts:
  - accessKey: {USER}
    secretKey: {USER_SECRET}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - DeniedTopic=DENY
  - accessKey: {ADMIN}
    secretKey: {ADMIN_SECRET}
    admin: true
"""
CPP_DRIVER = Path(__file__).with_name("cpp_acl_producer.py")
FIRST = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000) % 10_000_000}_{next(_names)}"


def config(ns: str, key: str = "", secret: str = "", instance: str = "acl") -> ClientConfig:
    return ClientConfig(namesrv_addr=ns, instance_name=instance, access_key=key, secret_key=secret,
                        rebalance_interval=1000, persist_consumer_offset_interval=1000)


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("acl")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    conf = {"aclEnable": "true", "aclFile": str(acl_file), "accessMessageInMemoryMaxRatio": "0"}
    with start_cluster(root / "cluster", brokers=["broker-a"], broker_conf=conf) as cluster:
        yield cluster


async def _create_topic(ns: str, topic: str) -> None:
    async with Admin(ns, access_key=ADMIN, secret_key=ADMIN_SECRET) as admin:
        await admin.create_topic(topic, queue_nums=2)


async def test_signed_clients_produce_and_consume(acl_cluster: Cluster) -> None:
    ns, topic = acl_cluster.namesrv_addr, unique("Acl")
    await _create_topic(ns, topic)
    async with Producer(unique("pg"), client_config=config(ns, USER, USER_SECRET)) as producer:
        for i in range(5):
            result = await producer.send(Message(topic, f"m{i}".encode()))
            assert result.send_status is SendStatus.SEND_OK
    received: list[MessageExt] = []
    consumer = PushConsumer(unique("cg"), config=FIRST, client_config=config(ns, USER, USER_SECRET, "acl-c"))
    consumer.subscribe(topic, "*")

    async def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        received.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    async with consumer:
        deadline = time.monotonic() + 20
        while len(received) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    assert sorted(m.body for m in received) == [f"m{i}".encode() for i in range(5)]


async def test_refusals_answer_no_permission_and_are_logged(acl_cluster: Cluster) -> None:
    ns, topic = acl_cluster.namesrv_addr, unique("AclRefused")
    await _create_topic(ns, topic)
    await _create_topic(ns, "DeniedTopic")
    cases = [
        (config(ns, USER, "wrongSecret"), topic, f"Check signature failed for accessKey={USER}"),
        (config(ns), topic, "No accessKey is configured"),
        (config(ns, "stranger1", "whatever1"), topic, "No acl config for stranger1"),
        (config(ns, USER, USER_SECRET), "DeniedTopic", "No permission for topic:DeniedTopic"),
    ]
    for client_config, target, remark in cases:
        async with Producer(unique("pg"), client_config=client_config) as producer:
            with pytest.raises(NoPermissionError) as info:
                await producer.send(Message(target, b"x"))
        assert info.value.code == ResponseCode.NO_PERMISSION
        assert remark in info.value.remark
    with pytest.raises(NoPermissionError, match="Need admin permission"):
        async with Admin(ns, access_key=USER, secret_key=USER_SECRET) as admin:
            await admin.create_topic(unique("NotMine"))
    # The transaction sweep's hand-back of half messages is admin-only too.
    broker = acl_cluster.broker_addr()
    with pytest.raises(NoPermissionError, match="Need admin permission"):
        async with Admin(ns, access_key=USER, secret_key=USER_SECRET) as admin:
            await admin.resume_half_messages(broker, b"")
    async with Admin(ns, access_key=ADMIN, secret_key=ADMIN_SECRET) as admin:
        assert await admin.resume_half_messages(broker, b"") == []
    logs = acl_cluster.brokers["broker-a"].logs(tail=400)
    assert "ACL refused SEND_MESSAGE_V2" in logs and "Check signature failed" in logs
    assert "No permission for topic:DeniedTopic" in logs


def _run_cpp(ns: str, topic: str, work: Path, *credentials: str) -> dict[str, object]:
    work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(CPP_DRIVER), ns, topic, unique("cpp_pg"), str(work), *credentials]
    done = subprocess.run(command,
                          capture_output=True, timeout=60, env=dict(os.environ, HOME=str(work)), check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


async def test_cpp_client_credentials(acl_cluster: Cluster, tmp_path: Path) -> None:
    ns, topic = acl_cluster.namesrv_addr, unique("AclCpp")
    await _create_topic(ns, topic)
    ok = await asyncio.to_thread(_run_cpp, ns, topic, tmp_path / "ok", USER, USER_SECRET)
    assert ok.get("status") == "OK", ok
    refused = await asyncio.to_thread(_run_cpp, ns, topic, tmp_path / "bad", USER, "wrongSecret")
    assert "error" in refused, refused  # the C++ client reports its own words; the reason is in the log
    cpp_refusals = [line for line in acl_cluster.brokers["broker-a"].logs(tail=400).splitlines()
                    if "ACL refused SEND_MESSAGE (10)" in line]  # the C++ client sends v1 headers
    reason = f"Check signature failed for accessKey={USER}"
    assert cpp_refusals and all(reason in line for line in cpp_refusals)


def test_acl_is_off_by_default_and_credentials_are_ignored(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=["broker-a"]) as cluster:
        junk = {"AccessKey": "nobody", "Signature": "bm90IGEgc2lnbmF0dXJl", "OnsChannel": "ALIYUN",
                "topic": "TBW102", "queueId": "0"}
        with SyncRemotingClient(RemotingClientConfig()) as client:
            answer = client.invoke(cluster.broker_addr("broker-a"),
                                   RemotingCommand.request(RequestCode.GET_MAX_OFFSET, junk), 5)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        topic = unique("NoAcl")
        ok = _run_cpp(cluster.namesrv_addr, topic, tmp_path / "cpp", USER, "wrongSecret")
        assert ok.get("status") == "OK", ok
        assert "ACL" not in cluster.brokers["broker-a"].logs(tail=400)
