"""Finding messages, end to end: `lakemq admin message query|view` as subprocesses against
real NameServer and broker processes. By key and time range (QUERY_MESSAGE through the
IndexFile), by unique key (UNIQ_KEY, the id a producer gets back) and by offset message id
(VIEW_MESSAGE_BY_ID); the indexes answer the same after a clean restart and after kill -9."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from lakemq.client import Message, SendResult, SyncProducer
from tests.cluster import Cluster, lakemq_command, start_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path) as running:
        yield running


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lakemq_command("admin", "message", *args), capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).parents[2], check=False)


def _send(producer: SyncProducer, topic: str, body: str, *keys: str) -> SendResult:
    msg = Message(topic, body.encode(), properties={"shade": body.upper()})
    msg.keys = list(keys)
    return producer.send(msg)


def test_by_key_time_range_unique_key_and_id_also_after_restarts(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, "Findable"
    with SyncProducer("FindProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        early = _send(producer, topic, "early", "order-7")
        time.sleep(1.1)
        window_begin = time.time()
        middle = _send(producer, topic, "middle", "order-7", "vip")
        window_end = time.time()
        time.sleep(1.1)
        _send(producer, topic, "late", "order-7")

    everything = cli("query", "-n", ns, "-t", topic, "-k", "order-7")
    assert everything.returncode == 0, everything.stderr
    assert "3 message(s)" in everything.stdout
    assert everything.stdout.index("early") < everything.stdout.index("middle") < everything.stdout.index("late")

    # Epoch milliseconds, and ISO local time (seconds are enough around a 1.1 s gap).
    by_ms = cli("query", "-n", ns, "-t", topic, "-k", "order-7",
                "--begin", str(int(window_begin * 1000)), "--end", str(int(window_end * 1000) + 1))
    assert by_ms.returncode == 0, by_ms.stderr
    assert "1 message(s)" in by_ms.stdout and "middle" in by_ms.stdout
    since = datetime.fromtimestamp(window_end + 0.5).isoformat(timespec="milliseconds")
    by_iso = cli("query", "-n", ns, "-t", topic, "-k", "order-7", "--begin", since)
    assert "1 message(s)" in by_iso.stdout and "late" in by_iso.stdout

    by_uniq = cli("view", "-n", ns, "-t", topic, "-u", middle.msg_id)
    assert by_uniq.returncode == 0, by_uniq.stderr
    assert "middle" in by_uniq.stdout and "MIDDLE" in by_uniq.stdout and middle.offset_msg_id in by_uniq.stdout

    for restart in ("sigterm", "kill9"):
        if restart == "sigterm":
            cluster.restart_broker()
        else:
            cluster.kill_broker()
            cluster.start_broker()
        vip = cli("query", "-n", ns, "-t", topic, "-k", "vip")
        assert vip.returncode == 0 and "1 message(s)" in vip.stdout and "middle" in vip.stdout, (restart, vip)
        by_id = cli("view", "-n", ns, "--id", early.offset_msg_id)
        assert by_id.returncode == 0 and "early" in by_id.stdout and "EARLY" in by_id.stdout, (restart, by_id)
    uniq = cli("query", "-n", ns, "-t", topic, "-u", early.msg_id)
    assert uniq.returncode == 0 and "1 message(s)" in uniq.stdout and "early" in uniq.stdout


def test_view_input_errors_are_one_line(cluster: Cluster) -> None:
    ns = cluster.namesrv_addr
    with SyncProducer("FindProducer", namesrv_addr=ns) as producer:
        producer.create_topic("FindNothing", 1)
    for args, expected in [
        ((), "error: give exactly one of --id and --unique-key"),
        (("-u", "0A0B"), "error: --unique-key needs --topic"),
        (("-t", "FindNothing", "-u", "7F00000100002A9F0000000000000000"),
         "error: no message of FindNothing with unique key 7F00000100002A9F0000000000000000"),
    ]:
        result = cli("view", "-n", ns, *args)
        assert result.returncode == 1 and result.stderr.strip() == expected, (args, result.stderr)
