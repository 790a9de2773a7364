"""Runs tests/compat/java (Apache RocketMQ 4.9.8's Java client) as a bounded subprocess and
parses its JSON lines into what each scenario sent and received.

The driver runs many scenarios in one JVM (a JVM start costs seconds on these machines), each
on its own topics and groups; :class:`JavaRun` holds the events of one run by scenario. The
JVM's user.home (client logs, broadcasting offsets) is the run's work dir.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.jvm import java_command

DRIVER_MAIN = "org.lakemq.compat.Driver"
# The driver's consumers rebalance only when told (NOTIFY_CONSUMER_IDS_CHANGED) or when they
# start: a periodic rebalance would hide a broker that never notifies.
CLIENT_OPTIONS = ("-Drocketmq.client.rebalance.waitInterval=600000", "-XX:TieredStopAtLevel=1")


@dataclass
class Event:
    raw: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @property
    def body(self) -> bytes:
        return base64.b64decode(self.raw["body"])

    @property
    def props(self) -> dict[str, str]:
        return dict(self.raw.get("props") or {})


@dataclass
class Scenario:
    name: str
    events: list[Event] = field(default_factory=list)

    def of(self, event: str, **match: Any) -> list[Event]:
        return [e for e in self.events if e["event"] == event and all(e.get(k) == v for k, v in match.items())]

    @property
    def error(self) -> str | None:
        errors = self.of("error")
        return errors[0]["trace"] if errors else None


@dataclass
class JavaRun:
    scenarios: dict[str, Scenario]
    stderr: str
    log_dir: Path

    def __getitem__(self, name: str) -> Scenario:
        scenario = self.scenarios.get(name)
        assert scenario is not None, f"scenario {name} printed nothing\n{self.stderr[-3000:]}"
        assert scenario.error is None, f"scenario {name} failed:\n{scenario.error}\n{self.client_log()}"
        assert scenario.of("done"), f"scenario {name} did not finish\n{self.stderr[-3000:]}"
        return scenario

    def client_log(self, lines: int = 60) -> str:
        text: list[str] = []
        for path in sorted(self.log_dir.rglob("*.log")):
            text.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(text[-lines:])


def _argv(namesrv: str, prefix: str, scenarios: list[str], work_dir: Path, timeout_s: float,
          options: dict[str, str]) -> list[str]:
    work_dir.mkdir(parents=True, exist_ok=True)
    args = ["--namesrv", namesrv, "--prefix", prefix, "--scenarios", ",".join(scenarios),
            "--timeout-s", str(int(timeout_s))]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", value]
    return java_command(DRIVER_MAIN, args, options=(f"-Duser.home={work_dir}",
                                                    f"-Drocketmq.client.logRoot={work_dir / 'logs'}",
                                                    *CLIENT_OPTIONS))


def _parse(lines: Iterable[str]) -> dict[str, Scenario]:
    by_name: dict[str, Scenario] = {}
    for line in lines:
        if not line.startswith("{"):
            continue  # the client may print a warning of its own
        event = Event(json.loads(line))
        by_name.setdefault(event["scenario"], Scenario(event["scenario"])).events.append(event)
    return by_name


def run_driver(namesrv: str, prefix: str, scenarios: list[str], work_dir: Path, *, timeout: float = 240.0,
               **options: str) -> JavaRun:
    """Run ``scenarios`` against ``namesrv`` in one JVM; every scenario's events, by name."""
    argv = _argv(namesrv, prefix, scenarios, work_dir, timeout * 0.6, options)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=work_dir, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(f"the Java driver hung past {timeout}s; last output:\n{out[-3000:]}") from None
    return JavaRun(_parse(done.stdout.splitlines()), done.stderr, work_dir / "logs")


class LiveDriver:
    """The driver running in the background, its events read as they come (a scenario that
    stays online while something else, such as mqadmin, works against it)."""

    def __init__(self, namesrv: str, prefix: str, scenarios: list[str], work_dir: Path, timeout: float = 120.0,
                 **options: str) -> None:
        self.work_dir = work_dir
        self._timeout = timeout
        self._lines: list[str] = []
        argv = _argv(namesrv, prefix, scenarios, work_dir, timeout, options)
        self._err = work_dir / "driver.err"
        with open(self._err, "wb") as err:
            self._proc = subprocess.Popen(argv, cwd=work_dir, stdout=subprocess.PIPE, stderr=err, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.append(line)

    def scenario(self, name: str) -> Scenario:
        return _parse(list(self._lines)).get(name) or Scenario(name)

    def wait_for(self, name: str, what: Callable[[Scenario], bool], timeout: float = 60.0) -> Scenario:
        deadline = time.monotonic() + timeout
        while True:
            scenario = self.scenario(name)
            assert scenario.error is None, f"scenario {name} failed:\n{scenario.error}"
            if what(scenario):
                return scenario
            assert self._proc.poll() is None, f"the Java driver exited {self._proc.returncode}"
            assert time.monotonic() < deadline, f"scenario {name}: condition not met in {timeout}s"
            time.sleep(0.05)

    def finish(self) -> JavaRun:
        try:
            self._proc.wait(self._timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the Java driver hung past {self._timeout}s") from None
        self._reader.join()
        return JavaRun(_parse(self._lines), self._err.read_text(errors="replace"), self.work_dir / "logs")

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._reader.join()
