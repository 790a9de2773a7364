"""The official RocketMQ C++ client (PyPI rocketmq 0.4.4) producing to and push-consuming from
a real lakemq broker: route lookup, TBW102 auto-creation, sends, heartbeat, rebalance, pulls,
tag filtering. The client runs in a subprocess (its native library owns threads and signals)
with HOME in the test directory, where it writes its logs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cluster import Cluster

pytest.importorskip("rocketmq.client")
pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

SCRIPT = textwrap.dedent("""
    import sys, time
    from rocketmq.client import Message, Producer, PushConsumer
    producer = Producer("CPP_PG")
    producer.set_namesrv_addr(sys.argv[1])
    producer.start()
    for i in range(6):
        msg = Message("CppTopic")
        msg.set_keys("k%d" % i)
        msg.set_tags("even" if i % 2 == 0 else "odd")
        msg.set_body("hello %d" % i)
        result = producer.send_sync(msg)
        print("SENT", int(result.status), result.offset, flush=True)
    producer.shutdown()
    got = []
    consumer = PushConsumer("CPP_CG")
    consumer.set_namesrv_addr(sys.argv[1])
    consumer.subscribe("CppTopic", lambda m: got.append((m.body, m.tags, m.keys)), "even")
    consumer.start()
    deadline = time.time() + 60
    while len(got) < 3 and time.time() < deadline:
        time.sleep(0.1)
    for body, tags, keys in sorted(got):
        print("GOT", body.decode(), tags.decode(), keys.decode(), flush=True)
    consumer.shutdown()
""")


def test_cpp_producer_and_push_consumer(fresh_cluster: Cluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, fresh_cluster.namesrv_addr],
        capture_output=True,
        text=True,
        timeout=100,
        env=dict(os.environ, HOME=str(home)),
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    sent = [line.split() for line in lines if line.startswith("SENT")]
    assert len(sent) == 6 and all(status == "0" for _, status, _ in sent)  # SEND_OK
    got = [line for line in lines if line.startswith("GOT")]
    assert got == ["GOT hello 0 even k0", "GOT hello 2 even k2", "GOT hello 4 even k4"]
