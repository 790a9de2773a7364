"""Cross-protocol: what the official 5.x Python client (gRPC) sent, the official C++ 4.x client
(PyPI rocketmq 0.4.4, remoting; tests/compat/cpp_driver.py) consumes with its PushConsumer:
every message once, body, tags, keys and properties as sent, the 5.x message id as its id."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.compat.cpp_client import CppClient
from tests.rmq5.rmq5 import grpc_cluster, send_all

pytest.importorskip("rocketmq.client")  # lakemq's .venv holds the C++ client's `rocketmq`
pytestmark = [pytest.mark.compat, pytest.mark.timeout(300)]

TOPIC, COUNT = "Rmq5ToCpp", 30


def _spec(i: int) -> dict[str, Any]:
    return {"body": f"to-cpp-{i}", "tag": ("TagA", "TagB", "TagC")[i % 3], "keys": [f"key-{i}", f"alt-{i}"],
            "properties": {"color": ("red", "green")[i % 2], "seq": str(i)}}


async def test_cpp_push_consumer_gets_what_the_5x_client_sent_once(python: str, grpc_port: int,
                                                                    tmp_path: Path) -> None:
    messages = [_spec(i) for i in range(COUNT)]
    with grpc_cluster(tmp_path, grpc_port, TOPIC) as cluster:
        sent = send_all(python, f"127.0.0.1:{grpc_port}", TOPIC, messages, tmp_path / "driver.log")
        ids = {m["body"]: line["message_id"] for m, line in zip(messages, sent)}

        cpp = CppClient(cluster.namesrv_addr, tmp_path / "cpp")
        deliveries = await cpp.consume("Rmq5CppGroup", TOPIC, expect=COUNT, props=("color", "seq", "UNIQ_KEY"),
                                       timeout=120)

    assert Counter(d.body for d in deliveries) == Counter(m["body"] for m in messages)  # each once, nothing else
    by_body = {d.body: d for d in deliveries}
    for m in messages:
        d = by_body[m["body"]]
        assert (d.topic, d.tags, d.reconsume_times, d.failed) == (TOPIC, m["tag"], 0, False)
        assert sorted((d.keys or "").split(" ")) == sorted(m["keys"])  # the 5.x client keeps keys as a set
        assert d.props["color"] == m["properties"]["color"] and d.props["seq"] == m["properties"]["seq"]
        assert d.id == d.props["UNIQ_KEY"] == ids[m["body"]]  # the 5.x message id is the C++ client's msgId
