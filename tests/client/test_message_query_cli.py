"""`lakemq admin message query|view` as a user runs them, against a real broker."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

from lakemq.client import Message, SyncProducer
from tests.client.client_helpers import unique
from tests.cluster import Cluster, lakemq_command


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its output in a pipe (80 columns: rich's width there without $COLUMNS)."""
    return subprocess.run(lakemq_command("admin", "message", *args), capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"}, check=False)


def _in_terminal(*args: str, columns: int = 80) -> tuple[int, str, str]:
    """The command on a pseudo-terminal COLUMNS wide: (exit code, what it shows, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(lakemq_command("admin", "message", *args), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", "TERM": "xterm"})
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    _, err = proc.communicate(timeout=60)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace")).replace("\r", "")
    return proc.returncode, shown, err


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
    assert by_key.stdout.splitlines()[-1] == "2 message(s)"
    assert "body-1" in by_key.stdout and "body-4" in by_key.stdout
    assert "body-0" not in by_key.stdout

    everything = _cli("query", "-n", ns, "--topic", topic, "--key", "all", "--max", "4")
    assert everything.stdout.splitlines()[-1] == ("the newest 4 message(s) shown, oldest first; older ones match "
                                                  "too: raise --max or narrow --begin/--end")
    assert everything.stdout.count("unique key: ") == 4
    # The newest --max (as a broker's IndexFile answers), listed oldest first.
    assert re.findall(r"body-\d", everything.stdout) == ["body-2", "body-3", "body-4", "body-5"]
    exactly = _cli("query", "-n", ns, "--topic", topic, "--key", "all", "--max", "6")
    assert exactly.stdout.splitlines()[-1] == "6 message(s)"  # all of them: nothing cut, nothing said

    by_uniq = _cli("query", "-n", ns, "--topic", topic, "--unique-key", results[2].msg_id)
    assert by_uniq.returncode == 0, by_uniq.stderr
    assert by_uniq.stdout.splitlines()[-1] == "1 message(s)" and "body-2" in by_uniq.stdout

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


def test_ids_are_never_cut_in_a_pipe_or_an_80_column_terminal(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("QueryIds")
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1)
        sent = []
        for i in range(3):
            msg = Message(topic, f"body-{i}".encode())
            msg.keys = ["wide"]
            sent.append(producer.send(msg))
    ids = [r.offset_msg_id for r in sent] + [r.msg_id for r in sent]
    piped = _cli("query", "-n", ns, "--topic", topic, "--key", "wide")
    assert piped.returncode == 0, piped.stderr
    fields = [(k.strip(), v) for k, v in (line.split(": ", 1) for line in piped.stdout.splitlines() if ": " in line)]
    assert sorted(v for k, v in fields if k == "msg id (offset)") == sorted(r.offset_msg_id for r in sent)
    assert sorted(v for k, v in fields if k == "unique key") == sorted(r.msg_id for r in sent)
    assert "…" not in piped.stdout
    code, shown, err = _in_terminal("query", "-n", ns, "--topic", topic, "--key", "wide")
    assert code == 0, err
    assert all(msg_id in shown for msg_id in ids), shown
    assert "…" not in shown
    code, wide, err = _in_terminal("query", "-n", ns, "--topic", topic, "--key", "wide", columns=250)
    assert code == 0 and all(msg_id in wide for msg_id in ids) and "┃" in wide  # room for a table
    code, view, err = _in_terminal("view", "-n", ns, "--id", sent[0].offset_msg_id)
    assert code == 0 and sent[0].offset_msg_id in view and sent[0].msg_id in view, err


def test_view_recognises_a_unique_key_given_as_id(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, unique("ViewUniq")
    with SyncProducer(unique("pg"), namesrv_addr=ns) as producer:
        producer.create_topic(topic, 1)
        result = producer.send(Message(topic, b"find me"))
    without_topic = _cli("view", "-n", ns, "--id", result.msg_id)
    assert without_topic.returncode == 1
    assert without_topic.stderr.strip().splitlines() == [
        (f"error: {result.msg_id} is a unique key (the id a producer gets back), not an offset message id: "
         f"add --topic TOPIC, or use --unique-key {result.msg_id} --topic TOPIC")]
    with_topic = _cli("view", "-n", ns, "--id", result.msg_id, "--topic", topic)
    assert with_topic.returncode == 0, with_topic.stderr
    assert "find me" in with_topic.stdout and result.offset_msg_id in with_topic.stdout
    not_an_id = _cli("view", "-n", ns, "--id", "Z" * 32)
    assert not_an_id.returncode == 1 and len(not_an_id.stderr.strip().splitlines()) == 1
