"""Start real NameServer and broker processes on loopback: for the demo, the benchmarks and the
integration tests.

    from lakemq.launcher import start_cluster

    with start_cluster(tmp_path) as cluster:     # a NameServer and broker-a, on free ports
        cluster.namesrv_addr                      # "127.0.0.1:PORT"
        cluster.broker_addr("broker-a")           # == cluster.brokers["broker-a"].addr
        cluster.restart_broker("broker-a")        # SIGTERM (must exit 0), start again: same port, same store
        cluster.stop_broker("broker-a"); cluster.kill_broker("broker-a"); cluster.start_broker("broker-a")
        cluster.add_broker("broker-b", {"brokerClusterName": "C2"})

Every process is ``lakemq namesrv`` / ``lakemq broker`` on a port from :func:`reserved_port` (a
restart reuses it); it is ready once it prints its boot line, which carries the bound address.
Broker stores are small (SMALL_STORE: 8 MiB CommitLog files, tiny index files) and live
under ``{root}/{broker}/store``; each process logs to ``{root}/{name}/logs`` and its stdout to
``{root}/{name}/{name}.out``. Leaving the ``with`` block sends SIGTERM to everything (SIGKILL
after a timeout); a broker that did not exit 0 fails the test, and on an exception the logs'
tails are printed (pytest shows them with the failure).
"""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SMALL_STORE", "Cluster", "ServerProcess", "lakemq_command", "reserved_port", "start_cluster"]

BOOT_TIMEOUT = 60.0
NAMESRV_READY = re.compile(r"Name Server boot success\. listening on (\S+?),")
BROKER_READY = re.compile(r"The broker\[[^,]+, (\S+?)\] boot success")
# Keeps stores small and quick to create; a test overrides any key through its broker conf.
SMALL_STORE = {
    "mappedFileSizeCommitLog": str(8 << 20),
    "mappedFileSizeConsumeQueue": str(6000 * 20),
    "maxHashSlotNum": "5000",
    "maxIndexNum": "20000",
    "flushIntervalCommitLog": "200",
    "flushConsumerOffsetInterval": "1000",
}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def reserved_port() -> int:
    """A free TCP port below the kernel's ephemeral range, with the two ports above it and the
    one two below free too (where a broker's HA listener, metrics and VIP channel listen by
    default: haListenPort, metricsPort and fastListenPort -1).

    A port the kernel picked (bind to 0) is an ephemeral port: once its server stops, any
    outgoing connection may be given it, and the server's restart on the same port fails with
    EADDRINUSE. The kernel never hands out ports below the range, so a server restarted there
    gets its port back.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(20002, max(low - 2, 20003))
        if all(_bindable(p) for p in (port - 2, port, port + 1, port + 2)):
            return port
    raise RuntimeError(f"no free block of ports (P - 2, P .. P + 2) in 20000..{low - 1}")


def _bindable(port: int) -> bool:
    # On every address: a server bound to any of them would refuse ours.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


# EADDRINUSE as the CLI prints it, from a plain bind ("[Errno 98] Address already in use") or
# from asyncio's ("[Errno 98] error while attempting to bind on address (...): address ...").
_PORT_TAKEN = f"[Errno {errno.EADDRINUSE}]"
_PORT_ATTEMPTS = 3


def lakemq_command(*args: str) -> list[str]:
    """The ``lakemq`` command run by this interpreter (lakemq/cli/__main__.py)."""
    return [sys.executable, "-m", "lakemq.cli", *args]


@dataclass
class ServerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    addr: str
    work_dir: Path

    @property
    def port(self) -> int:
        return int(self.addr.rpartition(":")[2])

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the exit code; SIGKILL and AssertionError if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"{self.name} ignored SIGTERM for {timeout}s\n{self.logs()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self, tail: int = 60) -> str:
        parts = []
        for path in [self.work_dir / f"{self.name}.out", *sorted((self.work_dir / "logs").glob("*.log"))]:
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"--- {path} ---\n" + "\n".join(lines))
        return "\n".join(parts)


def spawn(
    name: str, args: Sequence[str], work_dir: Path, ready: re.Pattern[str], timeout: float = BOOT_TIMEOUT,
    prefix: Sequence[str] = (),
) -> ServerProcess:
    """Run ``lakemq *args`` (behind ``prefix``, e.g. ``ip netns exec NS``) with stdout to a
    file; return once ``ready`` matches a new line."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out_path = work_dir / f"{name}.out"
    start = out_path.stat().st_size if out_path.exists() else 0  # a restart appends
    env = dict(os.environ, LAKEMQ_LOG_DIR=str(work_dir / "logs"), PYTHONUNBUFFERED="1")
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(
            [*prefix, *lakemq_command(*args)], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work_dir
        )
    deadline = time.monotonic() + timeout
    while True:
        with open(out_path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        match = ready.search(text)
        if match:
            return ServerProcess(name, proc, match.group(1), work_dir)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{name} did not boot (exit {proc.returncode}):\n{text[-3000:]}")
        time.sleep(0.05)


@dataclass
class Cluster:
    root: Path
    namesrv: ServerProcess | None = None
    brokers: dict[str, ServerProcess] = field(default_factory=dict)
    _confs: dict[str, dict[str, str]] = field(default_factory=dict)
    _prefixes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        # Without a NameServer brokers get a closed port: registration fails and is logged.
        return self.namesrv.addr if self.namesrv else "127.0.0.1:1"

    def broker_addr(self, name: str = "broker-a") -> str:
        return self.brokers[name].addr

    def start_namesrv(self) -> ServerProcess:
        """Start the NameServer, or start it again (after a kill) on the port brokers know."""
        work_dir = self.root / "namesrv"
        work_dir.mkdir(parents=True, exist_ok=True)
        conf = work_dir / "namesrv.conf"
        # The cluster's KV config (ORDER_TOPIC_CONFIG and the like) lives in its root, as its
        # stores do; the default, ~/namesrv/kvConfig.json, is shared by every cluster of the user.
        conf.write_text(f"kvConfigPath={work_dir / 'kvConfig.json'}\n")

        def start(port: int) -> ServerProcess:
            return spawn("namesrv", ["namesrv", "-c", str(conf), "--port", str(port),
                                     "--log-dir", str(work_dir / "logs")], work_dir, NAMESRV_READY)

        self.namesrv = start(self.namesrv.port) if self.namesrv is not None else _on_a_free_port(start)
        return self.namesrv

    def add_broker(self, name: str = "broker-a", conf: Mapping[str, str] | None = None,
                   port: int | None = None, *, prefix: Sequence[str] = ()) -> ServerProcess:
        """``name`` on a free port, or on ``port`` (a store another broker wrote names it in its
        message ids); its store is ``{root}/{name}/store``, which may be put there first. With
        ``prefix`` its command runs behind it (``ip netns exec NS``)."""
        self._confs[name] = {**SMALL_STORE, "brokerName": name, **(conf or {})}
        self._prefixes[name] = tuple(prefix)
        return self.start_broker(name, port=port)

    def start_broker(self, name: str = "broker-a", conf: Mapping[str, str] | None = None,
                     port: int | None = None) -> ServerProcess:
        """Start (or start again) ``name`` on its store, on its previous port if it had one."""
        if conf:
            self._confs[name].update(conf)
        work_dir = self.root / name
        work_dir.mkdir(parents=True, exist_ok=True)
        conf_path = work_dir / "broker.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in self._confs[name].items()))
        previous = self.brokers.get(name)

        def start(port: int) -> ServerProcess:
            return spawn(name, ["broker", "-c", str(conf_path), "--data-dir", str(work_dir / "store"),
                                "--port", str(port), "--namesrv", self.namesrv_addr,
                                "--log-dir", str(work_dir / "logs")], work_dir, BROKER_READY,
                         prefix=self._prefixes.get(name, ()))

        # A restart keeps its port (clients and the NameServer know it); a first start may move.
        if previous is not None:
            port = previous.port
        self.brokers[name] = start(port) if port is not None else _on_a_free_port(start)
        return self.brokers[name]

    def stop_broker(self, name: str = "broker-a") -> int:
        return self.brokers[name].stop()

    def kill_broker(self, name: str = "broker-a") -> None:
        self.brokers[name].kill()

    def restart_broker(self, name: str = "broker-a", conf: Mapping[str, str] | None = None) -> ServerProcess:
        code = self.stop_broker(name)
        assert code == 0, f"{name} exited {code} on SIGTERM\n{self.brokers[name].logs()}"
        return self.start_broker(name, conf)

    def close(self, check: bool = False) -> None:
        """Stop brokers, then the NameServer; with ``check``, a broker's non-zero exit fails."""
        failures = []
        for broker in self.brokers.values():
            was_running = broker.running
            code = broker.stop()
            if was_running and code != 0:
                failures.append(f"{broker.name} exited {code}\n{broker.logs()}")
        if self.namesrv is not None:
            self.namesrv.stop()
        if check and failures:
            raise AssertionError("\n".join(failures))

    def dump_logs(self) -> None:
        for proc in [*self.brokers.values(), *([self.namesrv] if self.namesrv else [])]:
            print(proc.logs())


def _on_a_free_port(start: Callable[[int], ServerProcess]) -> ServerProcess:
    """``start(port)`` on a reserved port; on another one if something took it in between."""
    for _ in range(_PORT_ATTEMPTS - 1):
        try:
            return start(reserved_port())
        except RuntimeError as exc:
            if _PORT_TAKEN not in str(exc):
                raise
    return start(reserved_port())


@contextmanager
def start_cluster(
    root: Path,
    brokers: Sequence[str] = ("broker-a",),
    broker_conf: Mapping[str, str] | None = None,
    *,
    with_namesrv: bool = True,
) -> Iterator[Cluster]:
    cluster = Cluster(Path(root))
    failed = False
    try:
        if with_namesrv:
            cluster.start_namesrv()
        for name in brokers:
            cluster.add_broker(name, broker_conf)
        yield cluster
    except BaseException:
        failed = True
        cluster.dump_logs()
        raise
    finally:
        cluster.close(check=not failed)
