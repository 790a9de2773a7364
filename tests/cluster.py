"""Real name server and broker processes on loopback for integration tests.

    with start_cluster(tmp_path, brokers=["broker-a"]) as cluster:
        cluster.namesrv_addr            # "127.0.0.1:port"
        cluster.brokers["broker-a"].addr
        cluster.stop_broker("broker-a") # SIGTERM, clean shutdown
        cluster.kill_broker("broker-a") # SIGKILL
        cluster.start_broker("broker-a")  # again, same store

Every process is ``lakemq namesrv`` / ``lakemq broker`` started with ``--port 0``; the bound
address is read from the boot line each prints. Extra broker.conf keys go in ``broker_conf``.
Logs are under ``{root}/logs``.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cluster", "BrokerProcess", "start_cluster", "lakemq_command"]

BOOT_TIMEOUT = 30.0
_NAMESRV_BOOT = re.compile(r"Name Server boot success\. listening on (\S+?),")
_BROKER_BOOT = re.compile(r"The broker\[[^,]+, (\S+?)\] boot success")


def lakemq_command(*args: str) -> list[str]:
    """The ``lakemq`` console script run by this interpreter."""
    return [sys.executable, "-c", "from lakemq.cli import main; main()", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _wait_boot(proc: subprocess.Popen[str], pattern: re.Pattern[str], what: str) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + BOOT_TIMEOUT
    seen: list[str] = []
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            match = pattern.search(line)
            if match:
                return match.group(1)
    proc.kill()
    raise RuntimeError(f"{what} did not boot (exit {proc.poll()}): {''.join(seen)[-2000:]}")


def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@dataclass
class BrokerProcess:
    name: str
    conf_path: Path
    data_dir: Path
    proc: subprocess.Popen[str] | None = None
    addr: str = ""


@dataclass
class Cluster:
    root: Path
    namesrv_addr: str = ""
    brokers: dict[str, BrokerProcess] = field(default_factory=dict)
    _namesrv: subprocess.Popen[str] | None = None

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def start_namesrv(self) -> None:
        self._namesrv = subprocess.Popen(
            lakemq_command("namesrv", "--port", "0", "--log-dir", str(self.log_dir)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        self.namesrv_addr = _wait_boot(self._namesrv, _NAMESRV_BOOT, "name server")

    def add_broker(self, name: str, conf: Mapping[str, str] | None = None) -> BrokerProcess:
        data_dir = self.root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        conf_path = self.root / f"{name}.conf"
        lines = {"brokerName": name, "brokerClusterName": "DefaultCluster", **(conf or {})}
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        broker = self.brokers[name] = BrokerProcess(name, conf_path, data_dir)
        self.start_broker(name)
        return broker

    def start_broker(self, name: str) -> None:
        broker = self.brokers[name]
        broker.proc = subprocess.Popen(
            lakemq_command("broker", "-c", str(broker.conf_path), "--data-dir", str(broker.data_dir),
                           "--port", "0", "--namesrv", self.namesrv_addr, "--log-dir", str(self.log_dir)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
        broker.addr = _wait_boot(broker.proc, _BROKER_BOOT, f"broker {name}")

    def stop_broker(self, name: str) -> None:
        broker = self.brokers[name]
        if broker.proc is not None:
            _stop(broker.proc)
            broker.proc = None

    def kill_broker(self, name: str) -> None:
        broker = self.brokers[name]
        if broker.proc is not None:
            _stop(broker.proc, signal.SIGKILL)
            broker.proc = None

    def close(self) -> None:
        for name in list(self.brokers):
            self.stop_broker(name)
        if self._namesrv is not None:
            _stop(self._namesrv)
            self._namesrv = None


@contextmanager
def start_cluster(root: Path, brokers: Sequence[str] = ("broker-a",),
                  broker_conf: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    cluster = Cluster(Path(root))
    try:
        cluster.start_namesrv()
        for name in brokers:
            cluster.add_broker(name, broker_conf)
        yield cluster
    finally:
        cluster.close()
