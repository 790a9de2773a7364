"""Consumers in separate processes splitting queues, rebalance when one leaves, and the CLI
round trip — all as real processes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from client_helpers import unique, wait_until

from lakemq.client import Message, Producer
from lakemq.client.admin import Admin
from tests.cluster import Cluster, lakemq_command

CONSUMER = Path(__file__).with_name("consumer_proc.py")


def read_lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def owned(path: Path) -> set[str]:
    return set(filter(None, path.read_text().split("\n"))) if path.exists() else set()


async def test_two_consumer_processes_split_then_rebalance(cluster: Cluster, tmp_path: Path) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("Split"), unique("sg")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=4)
    all_queues = {f"broker-a:{i}" for i in range(4)}
    procs = {
        name: subprocess.Popen([sys.executable, str(CONSUMER), ns, topic, group, name, str(tmp_path)],  # noqa: ASYNC220 - left running
                               stdout=subprocess.PIPE, text=True)
        for name in ("p1", "p2")
    }
    try:
        for proc in procs.values():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        o1, o2 = tmp_path / "p1.owned", tmp_path / "p2.owned"
        await wait_until(lambda: owned(o1) | owned(o2) == all_queues and not owned(o1) & owned(o2)
                         and len(owned(o1)) == 2, what="an even split of the queues")
        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            for i in range(200):
                await producer.send(Message(topic, f"m{i}".encode()))
            m1, m2 = tmp_path / "p1.msgs", tmp_path / "p2.msgs"
            await wait_until(lambda: len(read_lines(m1)) + len(read_lines(m2)) >= 200, what="200 messages")
            await asyncio.sleep(0.5)
            first1, first2 = read_lines(m1), read_lines(m2)
            assert first1 and first2  # both processes consumed
            assert sorted(first1 + first2) == sorted(f"m{i}" for i in range(200))  # each exactly once

            procs["p2"].send_signal(signal.SIGTERM)
            assert procs["p2"].wait(30) == 0
            await wait_until(lambda: owned(o1) == all_queues, what="p1 taking over every queue")
            for i in range(200, 300):
                await producer.send(Message(topic, f"m{i}".encode()))
            await wait_until(lambda: len(read_lines(m1)) - len(first1) >= 100, what="p1 consuming the rest")
            await asyncio.sleep(0.5)
        after = read_lines(m1)[len(first1):]
        assert sorted(after) == sorted(f"m{i}" for i in range(200, 300))
        assert read_lines(m2) == first2  # the one that left got nothing more
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lakemq_command(*args), capture_output=True, text=True, timeout=timeout, check=False)


def test_cli_produce_consume_round_trip(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("Cli"), unique("clig")
    created = run_cli("admin", "topic", "create", "-n", ns, "--topic", topic, "--queues", "2")
    assert created.returncode == 0, created.stderr
    assert f"topic {topic} created with 2 queue(s) on broker-a" in created.stdout
    listed = run_cli("admin", "topic", "list", "-n", ns)
    assert topic in listed.stdout.split()

    produced = run_cli("produce", "-n", ns, "--topic", topic, "--tags", "t1", "--keys", "k1 k2", "--count", "5",
                       "--body", "hello")
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.startswith(f"sent 5 message(s) to {topic}")
    stats = run_cli("admin", "topic", "stats", "-n", ns, "--topic", topic)
    assert stats.returncode == 0 and "broker-a" in stats.stdout

    consumed = run_cli("consume", "-n", ns, "--topic", topic, "--group", group, "--from", "first", "--count", "5")
    assert consumed.returncode == 0, consumed.stderr
    lines = consumed.stdout.splitlines()
    assert len(lines) == 5
    for line in lines:
        t, _queue, _offset, msg_id, tags, body = line.split("\t")
        assert (t, tags, body) == (topic, "t1", "hello") and len(msg_id) == 32
    assert sorted((int(line.split("\t")[1]), int(line.split("\t")[2])) for line in lines) == \
        sorted({(int(line.split("\t")[1]), int(line.split("\t")[2])) for line in lines})

    progress = run_cli("admin", "consumer", "progress", "-n", ns, "--group", group, "--topic", topic)
    assert progress.returncode == 0, progress.stderr
    assert "total lag 0" in progress.stdout


def test_cli_errors_are_one_line(cluster: Cluster) -> None:
    dead = run_cli("produce", "-n", "127.0.0.1:1", "--topic", "T", "--count", "1")
    assert dead.returncode == 1
    assert dead.stderr.strip().startswith("error:") and len(dead.stderr.strip().splitlines()) == 1
    bad_topic = run_cli("produce", "-n", cluster.namesrv_addr, "--topic", "bad/topic")
    assert bad_topic.returncode == 1 and "bad/topic" in bad_topic.stderr
    unknown_group = run_cli("admin", "consumer", "progress", "-n", cluster.namesrv_addr, "--group", unique("nobody"))
    assert unknown_group.returncode == 1 and unknown_group.stderr.startswith("error:")


def test_cli_consume_stops_cleanly_on_sigterm(cluster: Cluster) -> None:
    ns, topic, group = cluster.namesrv_addr, unique("CliTerm"), unique("termg")
    assert run_cli("produce", "-n", ns, "--topic", topic, "--count", "3").returncode == 0
    proc = subprocess.Popen(lakemq_command("consume", "-n", ns, "--topic", topic, "--group", group, "--from", "first"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    assert all(line.startswith(topic) for line in lines)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "consumed 3 message(s)" in err
    progress = run_cli("admin", "consumer", "progress", "-n", ns, "--group", group, "--topic", topic)
    assert "total lag 0" in progress.stdout  # the offsets were committed before exit


def test_push_consumer_starts_before_its_topic_exists_and_consumes_it_quietly(cluster: Cluster) -> None:
    """As RocketMQ's consumer: start() does not need the topic; once a producer creates it
    (auto-created on its first send) the consumer finds it and consumes from it. A new group's
    own %RETRY% topic is not the user's business: nothing reaches stderr."""
    ns, topic, group = cluster.namesrv_addr, unique("Later"), unique("lg")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("early_consumer_proc.py")), ns, topic,
                             group, "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready == "READY\n", ready + proc.communicate(timeout=30)[1]

        async def produce() -> None:
            async with Producer(unique("pg"), namesrv_addr=ns) as producer:
                for i in range(3):
                    await producer.send(Message(topic, f"later-{i}".encode()))

        asyncio.run(produce())
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert sorted(out.split()) == ["later-0", "later-1", "later-2"]
    assert err == ""
