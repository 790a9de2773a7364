"""Running the official 5.x Python client (tests/rmq5/rmq5_driver.py) in .venv-rmq5, and
reading back with lakemq's 4.x client what it sent."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakemq.client.results import PullStatus
from lakemq.client.sync import SyncProducer, SyncPullConsumer
from lakemq.common.message import MessageExt
from tests.cluster import Cluster, start_cluster

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("rmq5_driver.py")
INSTALL_TIMEOUT = 600


def rmq5_python() -> str:
    """.venv-rmq5's interpreter, installed first when missing (stamped: a no-op after)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "rmq5_env.sh")], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/rmq5_env.sh failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def grpc_cluster(root: Path, grpc_port: int, topic: str | None = None, queues: int = 4,
                 **conf: str) -> Iterator[Cluster]:
    """A NameServer and a broker serving gRPC on ``grpc_port`` (with the broker settings
    ``conf``), and ``topic`` created with ``queues`` queues when given."""
    with start_cluster(root, broker_conf={"grpcListenPort": str(grpc_port), **conf}) as cluster:
        if topic is not None:
            with SyncProducer("rmq5-test-admin", namesrv_addr=cluster.namesrv_addr) as admin:
                admin.create_topic(topic, queues)
        yield cluster


@dataclass
class Driver:
    """One driver process: its JSON lines so far."""

    process: subprocess.Popen[str]
    lines: list[dict[str, Any]]

    def _read_to(self, events: tuple[str, ...], timeout: float) -> dict[str, Any] | None:
        """Read the driver's JSON lines into ``lines`` until one with an event of ``events``
        (returned), or None at its end or after ``timeout``."""
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                self.lines.append(json.loads(line))
                if self.lines[-1].get("event") in events:
                    return self.lines[-1]
        return None

    def read_until(self, event: str, timeout: float) -> list[dict[str, Any]]:
        """Lines up to and including the first with ``event`` (the driver prints in order)."""
        if self._read_to((event,), timeout) is None:
            raise AssertionError(f"driver printed no {event!r} (exit {self.process.poll()}): {self.lines}")
        return self.lines

    def ask(self, timeout: float = 60, **command: Any) -> dict[str, Any]:
        """Send a command (the "simple" action); its answer, or its error line."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = self._read_to(("received", "acked", "changed", "error"), timeout)
        if answer is not None:
            return answer
        raise AssertionError(f"driver answered nothing to {command} (exit {self.process.poll()}): {self.lines[-5:]}")

    def consumed(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """The first ``count`` consumptions a "consume" driver reported."""
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while sum(1 for x in self.lines if x.get("event") == "consumed") < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{count} consumptions not reported: {self.lines}")
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"driver exited ({self.process.poll()}): {self.lines}")
            if line.startswith("{"):
                self.lines.append(json.loads(line))
        return [x for x in self.lines if x.get("event") == "consumed"][:count]

    def finish(self, timeout: float = 60) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout)


def start_driver(python: str, endpoint: str, topic: str, action: str, messages: list[dict[str, Any]],
                 log: Path, **extra: Any) -> Driver:
    spec = {"endpoint": endpoint, "topic": topic, "action": action, "messages": messages, **extra}
    process = subprocess.Popen([python, str(DRIVER), json.dumps(spec)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                               env={"HOME": str(log.parent), "PATH": "/usr/bin:/bin"})
    return Driver(process, [])


def send_all(python: str, endpoint: str, topic: str, messages: list[dict[str, Any]], log: Path,
             timeout: float = 120) -> list[dict[str, Any]]:
    """Send ``messages`` with a "send" driver; its "sent" lines, one a message in order."""
    driver = start_driver(python, endpoint, topic, "send", messages, log)
    try:
        sent = [line for line in driver.read_until("done", timeout) if line.get("event") == "sent"]
    finally:
        driver.finish()
    assert len(sent) == len(messages), driver.lines
    return sent


def pull_all(ns: str, topic: str, group: str) -> list[MessageExt]:
    """Every message in the topic's queues now, read with lakemq's 4.x pull consumer."""
    found: list[MessageExt] = []
    with SyncPullConsumer(group, namesrv_addr=ns) as consumer:
        for mq in consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            while True:
                result = consumer.pull(mq, "*", offset, 32)
                if result.pull_status is not PullStatus.FOUND:
                    break
                found.extend(result.msgs)
                offset = result.next_begin_offset
    return found


def wait_for_bodies(ns: str, topic: str, group: str, bodies: set[bytes], timeout: float) -> list[MessageExt]:
    deadline = time.monotonic() + timeout
    while True:
        found = pull_all(ns, topic, group)
        if bodies <= {m.body for m in found} or time.monotonic() > deadline:
            return found
        time.sleep(0.3)
