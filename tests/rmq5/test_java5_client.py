"""Apache RocketMQ's 5.x Java client (rocketmq-client-java 5.2.0, gRPC over TLS, the client's
default) sends to a lakemq broker's gRPC front door: normal, FIFO and transactional messages,
read back intact by lakemq's 4.x client; and its SimpleConsumer and PushConsumer receive what
lakemq's 4.x client sent."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.jvm import java_command
from lakemq.client.sync import SyncProducer
from lakemq.common.message import Message, MessageConst
from tests.cluster import Cluster
from tests.rmq5.rmq5 import grpc_cluster, wait_for_bodies

pytestmark = [pytest.mark.compat, pytest.mark.jvm]
TOPIC = "Java5Topic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("cluster"), grpc_port, TOPIC) as c:
        yield c


def test_java5_producer_over_tls(cluster: Cluster, grpc_port: int, tmp_path: Path) -> None:
    command = java_command("org.lakemq.rmq5.Rmq5Driver", [f"127.0.0.1:{grpc_port}", TOPIC],
                           groups=("rmq5-driver",))
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    sent = {entry["body"]: entry["message_id"] for entry in map(json.loads, lines) if entry["event"] == "sent"}
    bodies = {b"j0", b"j1", b"j2", b"g0", b"g1", b"g2", b"t0"}
    assert {body.encode() for body in sent} == bodies, done.stdout
    found = wait_for_bodies(cluster.namesrv_addr, TOPIC, "java5-reader", bodies, 30)
    assert Counter(m.body for m in found) == Counter(dict.fromkeys(bodies, 1))
    for msg in found:
        body = msg.body.decode()
        assert msg.unique_key == sent[body]
        assert msg.tags == "TagJ" and msg.keys == [f"key-{body}"] and msg.properties["lang"] == "java"
    group = [m for m in found if m.body.startswith(b"g")]
    assert {m.properties[MessageConst.SHARDING_KEY] for m in group} == {"java-group"}
    assert len({m.queue_id for m in group}) == 1


def _java_consumer(grpc_port: int, topic: str, mode: str, group: str, count: int, cwd: Path) -> list[dict[str, Any]]:
    command = java_command("org.lakemq.rmq5.Rmq5Consumer", [f"127.0.0.1:{grpc_port}", topic, mode, group, str(count)],
                           groups=("rmq5-driver",))
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[-1] == {"event": "done"}, done.stdout
    return lines[:-1]


@pytest.mark.parametrize("mode", ["simple", "push"])
def test_java5_consumers_over_tls_receive_what_the_4x_client_sent(cluster: Cluster, grpc_port: int, tmp_path: Path,
                                                                  mode: str) -> None:
    """SimpleConsumer (receive, changeInvisibleDuration, ack) and PushConsumer round trips."""
    topic = f"Java5Consume{mode.title()}"
    with SyncProducer("java5-4x-sender", namesrv_addr=cluster.namesrv_addr) as producer:
        producer.create_topic(topic, 4)
        ids = {producer.send(Message(topic, f"{mode}{i}".encode(), properties={"TAGS": "TagX"})).msg_id: f"{mode}{i}"
               for i in range(5)}
    lines = _java_consumer(grpc_port, topic, mode, f"Java5{mode.title()}Group", len(ids), tmp_path)
    assert {line["message_id"]: line["body"] for line in lines} == ids
    assert all(line["attempt"] == 1 and line["tag"] == "TagX" for line in lines), lines
    if mode == "simple":  # every ack (one after a change of invisible duration) succeeded: nothing comes back
        assert _java_consumer(grpc_port, topic, mode, f"Java5{mode.title()}Group", 0, tmp_path) == []
