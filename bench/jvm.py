"""The JVM side of the compatibility tests and benchmarks: classpaths fetched by
``scripts/jvm_deps.sh``, the Java driver (tests/compat/java), and Apache RocketMQ's own
NameServer and broker run from their Maven jars.

    from bench.jvm import RocketMQServer, java_command

    with RocketMQServer(tmp_path / "rmq", broker_conf={"flushDiskType": "SYNC_FLUSH"}) as rmq:
        rmq.namesrv_addr, rmq.broker_addr, rmq.store_dir
        rmq.restart()                       # SIGTERM (clean shutdown), start again on the same store

Groups: ``rocketmq`` (client and tools 4.9.8), ``rocketmq-server`` (NameServer and broker
4.9.7, the newest on Maven Central) and ``driver`` (our Java driver, compiled). Each process
gets its own ROCKETMQ_HOME with the logback files RocketMQ needs, its own user.home (the client
keeps offsets and logs there) and a small heap.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "jvm"
GROUPS = ("rocketmq", "rocketmq-server", "driver")
# JDK 17 closes the JDK internals RocketMQ 4.x reaches into (unmapping MappedByteBuffers).
JDK17_OPENS = (
    "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
)
BOOT_TIMEOUT = 90.0
NAMESRV_READY = "The Name Server boot success"
BROKER_READY = re.compile(r"The broker\[[^,]+, (\S+?)\] boot success")

__all__ = ["ROCKETMQ_GC", "SMALL_GC", "JvmUnavailable", "RocketMQServer", "classpath", "ensure_groups", "java_command",
           "rocketmq_broker_port", "rocketmq_home"]


class JvmUnavailable(RuntimeError):
    """A JVM group was not fetched (run scripts/jvm_deps.sh) or java is missing."""


_ENSURED: set[str] = set()


def ensure_groups(*groups: str) -> None:
    """Fetch (or build) the groups: scripts/jvm_deps.sh, which is offline and quick when a
    group's stamp matches its pom (and sources); once per process."""
    todo = [g for g in groups if g not in _ENSURED]
    if not todo:
        return
    missing = [g for g in todo if not (BUILD / g / ".stamp").exists()]
    if missing and (shutil.which("mvn") is None or shutil.which("java") is None):
        raise JvmUnavailable(f"JVM groups {missing} are not built and Maven or java is missing "
                             "(bash scripts/bootstrap.sh with LAKEMQ_JVM_GROUPS set installs them)")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "jvm_deps.sh"), *todo], capture_output=True,
                          text=True, timeout=900, check=False)
    if done.returncode != 0:  # Maven is there but failed: an error, not a reason to skip
        raise RuntimeError(f"scripts/jvm_deps.sh {' '.join(todo)} failed:\n{done.stderr[-2000:]}")
    _ENSURED.update(todo)


def classpath(*groups: str) -> str:
    ensure_groups(*groups)
    parts = []
    for group in groups:
        classes = BUILD / group / "target" / "classes"
        if classes.is_dir():
            parts.append(str(classes))
        parts.append(str(BUILD / group / "lib" / "*"))
    return os.pathsep.join(parts)


# A small, quick-starting JVM for tests; the benchmarks give servers RocketMQ's own G1 settings.
SMALL_GC = ("-XX:+UseSerialGC",)
ROCKETMQ_GC = ("-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
               "-XX:InitiatingHeapOccupancyPercent=30", "-XX:SoftRefLRUPolicyMSPerMB=0")


def java_command(main: str, args: Sequence[str], *, groups: Sequence[str] = ("driver",),
                 heap: str = "256m", options: Sequence[str] = (), gc: Sequence[str] = SMALL_GC) -> list[str]:
    """``java`` running ``main`` on the groups' classpath, with a fixed heap."""
    java = shutil.which("java")
    if java is None:
        raise JvmUnavailable("java is not on PATH")
    return [java, f"-Xms{heap}", f"-Xmx{heap}", *gc, *JDK17_OPENS, *options, "-cp", classpath(*groups),
            main, *args]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


def _free_ports(offsets: Sequence[int]) -> int:
    """A port P (below the ephemeral range, see lakemq.launcher) with P + each offset free."""
    from lakemq.launcher import reserved_port

    for _ in range(100):
        port = reserved_port()
        if all(_bindable(port + d) for d in offsets):
            return port
    raise RuntimeError("no free block of ports")


def rocketmq_broker_port() -> int:
    """A listen port for an Apache RocketMQ broker, which also listens on port - 2 (its VIP
    channel) and port + 1 (HA)."""
    return _free_ports((-2, -1, 0, 1))


_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %-5level [%thread] %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def rocketmq_home(home: Path, log_dir: Path, *components: str) -> Path:
    """A ROCKETMQ_HOME whose conf/logback_{component}.xml log to ``log_dir`` (RocketMQ's
    NameServer, broker and mqadmin refuse to start without one)."""
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for component in components:
        (conf / f"logback_{component}.xml").write_text(_LOGBACK.format(log=log_dir / f"{component}.log"))
    return home


class _Process:
    def __init__(self, name: str, argv: list[str], work_dir: Path, env: Mapping[str, str]) -> None:
        self.name = name
        self.out_path = work_dir / f"{name}.out"
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env),
                                         cwd=work_dir, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, pattern: str | re.Pattern[str], start: int, timeout: float = BOOT_TIMEOUT) -> str:
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            text = self.out_path.read_bytes()[start:].decode(errors="replace")
            match = regex.search(text)
            if match:
                return match.group(1) if match.groups() else match.group(0)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Apache RocketMQ {self.name} did not boot (exit {self.proc.returncode}):\n"
                                   f"{text[-3000:]}")
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (RocketMQ's shutdown hook flushes and removes the abort file); SIGKILL after
        ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class RocketMQServer:
    """Apache RocketMQ's NameServer and one master broker on loopback, from the Maven jars.

    The store is ``{root}/store`` (CommitLog in ``store/commitlog``); logs are in ``{root}/logs``.
    ``broker_conf`` entries override the defaults below (RocketMQ's own key names).
    """

    def __init__(self, root: Path, broker_conf: Mapping[str, str] | None = None, *,
                 broker_name: str = "rmq-a", cluster: str = "RmqCluster", heap: str = "512m",
                 with_namesrv: bool = True, namesrv_addr: str | None = None) -> None:
        self.root = Path(root)
        self.store_dir = self.root / "store"
        self.broker_name = broker_name
        self.cluster = cluster
        self.heap = heap
        self.with_namesrv = with_namesrv
        self.namesrv_addr = namesrv_addr or ""
        self.broker_addr = ""
        self.broker_conf = dict(broker_conf or {})
        self.namesrv: _Process | None = None
        self.broker: _Process | None = None
        self._broker_port = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            print(self.logs())
        self.close()

    def start(self) -> None:
        ensure_groups("rocketmq-server")
        rocketmq_home(self.root / "home", self.root / "logs", "namesrv", "broker")
        if self.with_namesrv and self.namesrv is None:
            port = _free_ports((0,))
            (self.root / "namesrv.conf").write_text(f"listenPort={port}\n")
            self.namesrv = self._spawn("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup",
                                       self.root / "namesrv.conf", heap="256m")
            self.namesrv.wait_ready(NAMESRV_READY, 0)
            self.namesrv_addr = f"127.0.0.1:{port}"
        self.start_broker()

    def start_broker(self) -> None:
        # The broker also listens on port - 2 (VIP channel) and port + 1 (HA).
        if not self._broker_port:
            self._broker_port = rocketmq_broker_port()
        conf = {
            "brokerClusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": "0",
            "brokerIP1": "127.0.0.1",
            "listenPort": str(self._broker_port),
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": str(self.store_dir),
            "storePathCommitLog": str(self.store_dir / "commitlog"),
            "autoCreateTopicEnable": "true",
            "mappedFileSizeCommitLog": str(64 << 20),
            **self.broker_conf,
        }
        path = self.root / "broker.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        out = self.root / "broker.out"
        start = out.stat().st_size if out.exists() else 0
        self.broker = self._spawn("broker", "org.apache.rocketmq.broker.BrokerStartup", path, heap=self.heap)
        self.broker_addr = self.broker.wait_ready(BROKER_READY, start)

    def _spawn(self, name: str, main: str, conf: Path, heap: str) -> _Process:
        home = self.root / "home"
        env = dict(os.environ, ROCKETMQ_HOME=str(home))
        argv = java_command(main, ["-c", str(conf)], groups=("rocketmq-server",), heap=heap,
                            options=(f"-Duser.home={home}",))
        return _Process(name, argv, self.root, env)

    def stop_broker(self) -> int:
        assert self.broker is not None
        return self.broker.stop()

    def kill_broker(self) -> None:
        assert self.broker is not None
        self.broker.kill()

    def restart(self, broker_conf: Mapping[str, str] | None = None) -> None:
        self.stop_broker()
        self.broker_conf.update(broker_conf or {})
        self.start_broker()

    def close(self) -> None:
        for proc in (self.broker, self.namesrv):
            if proc is not None:
                proc.stop()

    @property
    def broker_pid(self) -> int:
        assert self.broker is not None
        return self.broker.pid

    def logs(self, tail: int = 40) -> str:
        parts = []
        for path in [self.root / "namesrv.out", self.root / "broker.out", *sorted((self.root / "logs").glob("*.log"))]:
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"--- {path} ---\n" + "\n".join(lines))
        return "\n".join(parts)
