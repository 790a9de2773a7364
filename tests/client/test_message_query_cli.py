"""`lakemq admin message query|view` as a user runs them, against a real broker."""

from __future__ import annotations

import subprocess

from lakemq.client import Message, SyncProducer
from tests.client.client_helpers import unique
from tests.cluster import Cluster, lakemq_command


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lakemq_command("admin", "message", *args), capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})


def test_query_by_key_unique_key_and_view_by_id(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("Query")
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        results = []
        for i in range(6):
            msg = Message(topic, f"body-{i}".encode(), properties={"color": "blue"})
            msg.keys = [f"order-{i % 3}", "all"]
            msg.tags = "TagQ"
            results.append(producer.send(msg))

    by_key = _cli("query", "-n", ns, "--topic", topic, "--key", "order-1")
    assert by_key.returncode == 0, by_key.stderr
    assert "2 message(s)" in by_key.stdout and "body-1" in by_key.stdout and "body-4" in by_key.stdout
    assert "body-0" not in by_key.stdout

    everything = _cli("query", "-n", ns, "--topic", topic, "--key", "all", "--max", "4")
    assert "4 message(s)" in everything.stdout

    by_uniq = _cli("query", "-n", ns, "--topic", topic, "--unique-key", results[2].msg_id)
    assert by_uniq.returncode == 0, by_uniq.stderr
    assert "1 message(s)" in by_uniq.stdout and "body-2" in by_uniq.stdout

    view = _cli("view", "-n", ns, "--id", results[5].offset_msg_id)
    assert view.returncode == 0, view.stderr
    assert "body-5" in view.stdout and "color" in view.stdout and "blue" in view.stdout


def test_not_found_and_bad_input_are_one_line_errors(cluster: Cluster) -> None:
    ns = cluster.namesrv_addr
    topic = unique("QueryNone")
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1)
    missing = _cli("query", "-n", ns, "--topic", topic, "--key", "nope")
    assert missing.returncode == 1 and missing.stderr.strip() == f"error: no message of {topic} with key nope"
    both = _cli("query", "-n", ns, "--topic", topic)
    assert both.returncode == 1 and "exactly one of --key and --unique-key" in both.stderr
    bad_id = _cli("view", "-n", ns, "--id", "not-hex")
    assert bad_id.returncode == 1 and len(bad_id.stderr.strip().splitlines()) == 1
