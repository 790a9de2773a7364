"""The lake service: ``tier serve`` with ``lakeServiceAddr`` serves Spark Connect from its warm
session once the lake's tables are registered. ``lakemq sql -c`` and ``replay --service`` run
on it (no driver of their own; ``admin message query --lake`` answers from the lake's index in
its own process, neither the service nor a driver needed), the live union counts
messages the lake does not hold yet, a service that is down is one progress line and the
command still answers on a Spark of its own, and SIGTERM closes the Connect port."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import wait_flushed

from lakemq.client import SyncProducer
from lakemq.common.message import Message
from lakemq.launcher import reserved_port
from tests.cli_in_process import lakemq_in_process, stderr_lines
from tests.cluster import lakemq_command, start_cluster, write_tier_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "served_orders"
TARGET = "served_replayed"


def _send(producer: SyncProducer, start: int, count: int) -> int:
    """Messages ``start .. start+count-1`` with key ``k<i>``; the CommitLog offset of the last."""
    last = -1
    for i in range(start, start + count):
        msg = Message(TOPIC, f"m-{i}".encode())
        msg.keys = [f"k{i}"]
        last = int(producer.send(msg).offset_msg_id[-16:], 16)
    return last


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _count(stdout: str) -> int:
    """The one value of a one-column, one-row result as print_rows shows it."""
    found = re.search(r"(?:│\s*|^n: )(\d+)\s*(?:│|$)", stdout, re.MULTILINE)
    assert found, stdout
    return int(found.group(1))


# Modules a lake service client has no use for: the readers run in the service's Python workers,
# and the client is lakemq's own (lakemq.jobs.connect_client), not pyspark's. (That numpy and
# pandas stay out is checked in test_lake_service_parts.py through sys.modules: an import of
# them that the client refuses still shows in -X importtime's lines.)
THICK_MODULES = {"lakemq.client", "lakemq.jobs.live_source", "lakemq.jobs.commitlog_source", "lakemq.broker.ha.master",
                 "lakemq.store.message_store", "pyspark"}


def _worker_daemons(pid: int) -> set[int]:
    """The pyspark daemons (one per kind of Python worker) among ``pid``'s descendants: not the
    workers each forks (they share its command line), which come and go with the tasks."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(status.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                if b"pyspark.daemon" in (Path("/proc") / str(child) / "cmdline").read_bytes():
                    found.add(child)
                    continue  # its children are its forked workers
            except OSError:
                continue
            todo.append(child)
    return found


def _imported(stderr: str) -> set[str]:
    """The modules a process run with PYTHONPROFILEIMPORTTIME=1 imported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _run(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(lakemq_command(*args), capture_output=True, text=True, timeout=300, env=env, check=False)
    return done, time.monotonic() - began


@pytest.mark.timeout(900)  # tier serve's own driver and its warm-up pass, on a loaded machine
def test_service_answers_live_and_stops_and_fallback_starts_spark(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    port = reserved_port()
    broker_conf = {"mappedFileSizeCommitLog": str(1 << 20), "lakeUri": str(lake), "fileReservedTime": "0",
                   "tierSealIdleMs": "600000"}
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=broker_conf) as cluster:
        ns = cluster.namesrv_addr
        store = tmp_path / BROKER / "store"
        with SyncProducer("served_producer", namesrv_addr=ns) as producer:
            producer.create_topic(TOPIC, 2)
            producer.create_topic(TARGET, 2)
            began = int(time.time() * 1000)
            wait_flushed(store, _send(producer, 0, 30))
            # One pass at start (the lake has no table before it), then none for ten minutes:
            # what is sent after it stays hot, for the live union to find.
            conf = write_tier_conf(tmp_path, store, BROKER, {
                "lakeUri": str(lake), "tierSealIdleMs": "600000", "namesrvAddr": ns,
                "lakeServiceAddr": f"127.0.0.1:{port}"})
            env = dict(os.environ, LAKEMQ_LOG_DIR=str(tmp_path / "logs"), COLUMNS="200")
            serve = subprocess.Popen(
                lakemq_command("tier", "serve", "-c", str(conf), "--master", "local[2]", "--interval-ms",
                               "600000", "--no-retention"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            try:
                assert serve.stdout is not None
                assert serve.stdout.readline().startswith("tier serve ready: warmed up in ")
                first = serve.stdout.readline()
                assert " pass 1: committed 1 range(s), 30 rows" in first, (first, serve.stderr.read() if serve.stderr else "")
                ready = serve.stdout.readline()
                assert ready.startswith(f"lake service ready on sc://127.0.0.1:{port}"), ready
                assert "messages" in ready and "user_messages" in ready
                ended_tiered = int(time.time() * 1000)
                _send(producer, 30, 20)  # acknowledged, not in the lake

                # lakemq sql -c: on the service, no Spark here; messages is the live union.
                # tier serve warmed the clients' path: the first query starts no Python worker.
                daemons = _worker_daemons(serve.pid)
                assert daemons, "tier serve started no Python worker daemon before it was ready"
                count = f"SELECT count(*) AS n FROM messages WHERE topic = '{TOPIC}'"
                done, seconds = _run(dict(env, PYTHONPROFILEIMPORTTIME="1"), "sql", "-c", str(conf), count)
                assert done.returncode == 0, done.stderr[-3000:]
                assert _worker_daemons(serve.pid) <= daemons, (daemons, _worker_daemons(serve.pid))
                # A thin client: registering the live source sends a reference to its class, so
                # the readers (the broker client, the decoders) and the HA server are not imported.
                imported = _imported(done.stderr)
                assert "lakemq.jobs.connect_client" in imported, done.stderr[-3000:]
                assert not imported & THICK_MODULES, imported & THICK_MODULES
                assert f"connecting to the lake service at 127.0.0.1:{port}" in done.stderr
                assert "starting Spark" not in done.stderr, done.stderr
                assert _count(done.stdout) == 50, done.stdout
                print(f"lakemq sql through the service: {seconds:.1f}s end to end")
                # The service's session schedules FAIR: a query does not queue behind a pass.
                mode, _ = _run(env, "sql", "-c", str(conf), "SET spark.scheduler.mode")
                assert mode.returncode == 0 and re.search(r"spark\.scheduler\.mode\s*│\s*FAIR", mode.stdout), \
                    (mode.stdout, mode.stderr[-2000:])
                # --master local[2]: a third slot for queries, the passes planning two tasks.
                for key, value in (("spark.master", r"local\[3\]"), ("spark.default.parallelism", "2")):
                    said, _ = _run(env, "sql", "-c", str(conf), f"SET {key}")
                    assert said.returncode == 0 and re.search(rf"{re.escape(key)}\s*│\s*{value}\s*│", said.stdout), \
                        (said.stdout, said.stderr[-2000:])
                lake_only, _ = _run(env, "sql", "-c", str(conf),
                                    f"SELECT count(*) AS n FROM messages_lake WHERE topic = '{TOPIC}'")
                assert lake_only.returncode == 0 and _count(lake_only.stdout) == 30, lake_only.stdout

                # admin message query --lake given the service (the cluster unreachable: the lake
                # alone answers, so the row shown is the lake's): the lake's index answers it in
                # this process, neither the service nor a Spark of its own is needed.
                nowhere = f"127.0.0.1:{reserved_port()}"
                found, seconds = _run(env, "admin", "message", "query", "-n", nowhere, "-t", TOPIC, "-k", "k7",
                                      "--lake", str(lake), "--service", f"127.0.0.1:{port}")
                assert found.returncode == 0, found.stderr[-3000:]
                assert "connecting to the lake service" not in found.stderr and "starting Spark" not in found.stderr
                assert re.search(r"│\s*lake\s*│", found.stdout) and "m-7" in found.stdout, found.stdout
                assert "1 message(s)" in found.stdout, found.stdout
                print(f"admin message query --lake from the lake's index: {seconds:.1f}s end to end")

                # replay of the tiered 30 on the service.
                replayed, seconds = _run(env, "replay", "-n", ns, "--topic", TOPIC, "--target-topic", TARGET,
                                         "--from", str(began), "--to", str(ended_tiered), "--lake", str(lake),
                                         "--checkpoint", str(tmp_path / "replay.json"),
                                         "--service", f"sc://127.0.0.1:{port}")
                assert replayed.returncode == 0, replayed.stderr[-3000:]
                assert "starting Spark" not in replayed.stderr and "replayed 30 message(s)" in replayed.stdout, \
                    (replayed.stdout, replayed.stderr[-2000:])
                print(f"replay of 30 through the service: {seconds:.1f}s end to end")
            finally:
                serve.terminate()
                out, err = serve.communicate(timeout=120)
            # SIGTERM: a clean stop, and the Connect port is closed.
            assert serve.returncode == 0, err[-3000:]
            assert "stopped after 1 pass(es)" in out
            assert not _port_open(port), "tier serve left Spark Connect's port open"

            # The service down: one progress line says so, and the command answers on a Spark
            # of its own (here the test's session, in this process: no third driver start).
            fallback = lakemq_in_process(spark, "sql", "-c", str(conf), count,
                                         env={"COLUMNS": "200", "LAKEMQ_LOG_DIR": str(tmp_path / "logs")})
            assert fallback.returncode == 0, fallback.stderr[-3000:]
            assert f"the lake service at 127.0.0.1:{port} is not reachable" in fallback.stderr, fallback.stderr
            assert stderr_lines(fallback.stderr) == [], fallback.stderr
            assert _count(fallback.stdout) == 50, fallback.stdout
