"""The broker's ACL (aclEnable) holds for RocketMQ 5 clients as for remoting ones: the official
Python client signs with MQv2-HMAC-SHA1 and the same accounts and permissions decide."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client.admin import Admin
from tests.cluster import Cluster, start_cluster
from tests.rmq5.rmq5 import rmq5_python, start_driver

pytestmark = pytest.mark.compat
USER, USER_SECRET = "rmq5User", "userSecret5"
ADMIN, ADMIN_SECRET = "rmq5Admin", "adminSecret5"
ACL_FILE = f"""
accounts:
  - accessKey: {USER}
    secretKey: {USER_SECRET}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - Rmq5Denied=DENY
      - Rmq5ReadOnly=SUB
  - accessKey: {ADMIN}
    secretKey: {ADMIN_SECRET}
    admin: true
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("acl")
    (root / "plain_acl.yml").write_text(ACL_FILE)
    conf = {"aclEnable": "true", "aclFile": str(root / "plain_acl.yml"), "grpcListenPort": str(grpc_port)}
    with start_cluster(root / "cluster", broker_conf=conf) as running:

        async def topics() -> None:
            async with Admin(running.namesrv_addr, access_key=ADMIN, secret_key=ADMIN_SECRET) as admin:
                for topic in ("Rmq5Acl", "Rmq5Denied", "Rmq5ReadOnly", "Rmq5AclConsume"):
                    await admin.create_topic(topic, queue_nums=2)

        asyncio.run(topics())
        yield running


def _send(grpc_port: int, topic: str, tmp_path: Path, ak: str, sk: str) -> list[dict[str, object]]:
    driver = start_driver(rmq5_python(), f"127.0.0.1:{grpc_port}", topic, "send", [{"body": "a"}],
                          tmp_path / f"driver-{ak}-{topic}.log", ak=ak, sk=sk)
    try:
        return [line for line in driver.read_until("done", 90) if line.get("event") in ("sent", "error")]
    finally:
        driver.finish()


def test_signed_5x_producer_sends_and_refusals_follow_the_acl(cluster: Cluster, grpc_port: int,
                                                             tmp_path: Path) -> None:
    [ok] = _send(grpc_port, "Rmq5Acl", tmp_path, USER, USER_SECRET)
    assert ok["event"] == "sent", ok
    [bad_secret] = _send(grpc_port, "Rmq5Acl", tmp_path, USER, "wrongSecret")
    assert bad_secret["event"] == "error", bad_secret  # its route is refused: nowhere to send
    [denied] = _send(grpc_port, "Rmq5Denied", tmp_path, USER, USER_SECRET)
    assert denied["event"] == "error", denied
    # SUB only: the route is given, the send itself is refused FORBIDDEN with the reason.
    [read_only] = _send(grpc_port, "Rmq5ReadOnly", tmp_path, USER, USER_SECRET)
    assert read_only["event"] == "error" and "ForbiddenException" in str(read_only["error"]), read_only
    assert "No permission for topic:Rmq5ReadOnly (needs PUB" in str(read_only["error"])
    logs = cluster.brokers["broker-a"].logs(tail=400)
    assert f"Check signature failed for accessKey={USER}" in logs
    assert "No permission for topic:Rmq5Denied" in logs


def test_signed_5x_simple_consumer_receives_and_acks(cluster: Cluster, grpc_port: int, tmp_path: Path) -> None:
    """ReceiveMessage and AckMessage pass the ACL with SUB on the topic and the group."""
    [sent] = _send(grpc_port, "Rmq5AclConsume", tmp_path, USER, USER_SECRET)
    assert sent["event"] == "sent", sent
    driver = start_driver(rmq5_python(), f"127.0.0.1:{grpc_port}", "Rmq5AclConsume", "simple", [],
                          tmp_path / "consumer.log", ak=USER, sk=USER_SECRET, group="Rmq5AclGroup")
    try:
        driver.read_until("started", 60)
        got = driver.ask(op="receive", max=16, invisible_s=30)
        assert [m["message_id"] for m in got["messages"]] == [sent["message_id"]], got
        assert driver.ask(op="ack", id=sent["message_id"])["event"] == "acked"
    finally:
        driver.finish()
