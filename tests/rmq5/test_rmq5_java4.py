"""Cross-protocol: what the official 5.x Python client (gRPC) sent, Apache RocketMQ's 4.9 Java
client (remoting; tests/compat/java) consumes with its DefaultMQPushConsumer: every message
once, body, tags, keys and properties as sent, the 5.x message id as its msgId."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.compat.java_client import run_driver
from tests.rmq5.rmq5 import grpc_cluster, send_all

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(300)]

TOPIC, COUNT = "Rmq5ToJava4", 30


def _spec(i: int) -> dict[str, Any]:
    return {"body": f"to-java4-{i}", "tag": ("TagA", "TagB")[i % 2], "keys": [f"key-{i}"],
            "properties": {"color": ("red", "green", "blue")[i % 3], "seq": str(i)}}


def test_java_4x_push_consumer_gets_what_the_5x_client_sent_once(python: str, grpc_port: int, tmp_path: Path) -> None:
    messages = [_spec(i) for i in range(COUNT)]
    with grpc_cluster(tmp_path, grpc_port, TOPIC) as cluster:
        sent = send_all(python, f"127.0.0.1:{grpc_port}", TOPIC, messages, tmp_path / "driver.log")
        ids = {m["body"]: line["message_id"] for m, line in zip(messages, sent)}
        run = run_driver(cluster.namesrv_addr, "R5", ["readall"], tmp_path / "java", topics=TOPIC,
                         expect=str(COUNT), group="G_Rmq5ToJava4")
    got = run["readall"].of("received")
    assert Counter(e.body.decode() for e in got) == Counter(m["body"] for m in messages)  # each once
    by_body = {e.body.decode(): e for e in got}
    for m in messages:
        e = by_body[m["body"]]
        assert (e["topic"], e.get("tags"), e.get("keys"), e["reconsumeTimes"]) == (TOPIC, m["tag"], m["keys"][0], 0)
        assert e.props["color"] == m["properties"]["color"] and e.props["seq"] == m["properties"]["seq"]
        assert e["msgId"] == e.props["UNIQ_KEY"] == ids[m["body"]]  # the 5.x message id is the 4.x msgId
