"""Server processes for the peer benchmarks: install, free ports, start, wait, stop.

Every server is started in a session of its own (``start_new_session``) so that stopping it can
signal the whole process tree (RabbitMQ's beam.smp and helpers, a broker's children) and so
that leftovers can be found afterwards by session id.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "PeerUnavailable",
    "ServerProcess",
    "ensure_binary",
    "free_port",
    "session_pids",
    "wait_tcp",
    "wait_until",
]

_apt_updated = False


class PeerUnavailable(RuntimeError):
    """A peer's server cannot be installed or started on this machine."""


def ensure_binary(binary: str, package: str) -> str:
    """Return the path of ``binary``, installing Debian ``package`` first when it is missing."""
    global _apt_updated
    found = shutil.which(binary) or _sbin(binary)
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise PeerUnavailable(f"{binary} is missing and apt-get is not available to install {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _apt_updated:
        _run_apt(["apt-get", "update", "-q"], env, package)
        _apt_updated = True
    _run_apt(["apt-get", "install", "-y", "-q", package], env, package)
    found = shutil.which(binary) or _sbin(binary)
    if not found:
        raise PeerUnavailable(f"installed {package} but {binary} is still not on PATH")
    return found


def _sbin(binary: str) -> str | None:
    for folder in ("/usr/sbin", "/usr/lib/rabbitmq/bin"):
        path = Path(folder, binary)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def _run_apt(argv: list[str], env: Mapping[str, str], package: str) -> None:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"{' '.join(argv)} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PeerUnavailable(f"{' '.join(argv)} failed for {package}: {' | '.join(tail)}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, below the kernel's ephemeral range and
    with its neighbours free (lakemq.launcher.reserved_port): a port the kernel picks is an
    ephemeral one, which any process's next outgoing connection may take before the server
    binds it (a broker also listens on ports next to its own)."""
    from lakemq.launcher import reserved_port

    return reserved_port()


def wait_until(check: Callable[[], bool], timeout: float, what: str,
               alive: Callable[[], bool] = lambda: True) -> None:
    """Poll ``check`` until it is true; fail after ``timeout`` seconds or when ``alive`` is false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise PeerUnavailable(f"{what}: the server exited while starting")
        time.sleep(0.1)
    raise PeerUnavailable(f"{what}: not ready after {timeout:.0f} s")


def wait_tcp(port: int, timeout: float, what: str, alive: Callable[[], bool] = lambda: True) -> None:
    def accepting() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    wait_until(accepting, timeout, f"{what} on 127.0.0.1:{port}", alive)


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp session ...
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


class ServerProcess:
    """One server started in its own session; :meth:`stop` ends every process of that session."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self._popen = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise PeerUnavailable(f"cannot start {name}: {exc}") from exc
        self.sid = self._popen.pid  # the session leader's pid is the session id

    @property
    def pid(self) -> int:
        return self._popen.pid

    def alive(self) -> bool:
        return self._popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the session, wait up to ``grace`` seconds, then SIGKILL what is left."""
        try:
            self._signal_session(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (self.alive() or session_pids(self.sid)):
                self._popen.poll()
                time.sleep(0.05)
            if self.alive() or session_pids(self.sid):
                self._signal_session(signal.SIGKILL)
                self._popen.wait(timeout=10)
                wait_until(lambda: not session_pids(self.sid), 10, f"{self.name} teardown")
        finally:
            self._log.close()

    def _signal_session(self, sig: signal.Signals) -> None:
        targets = set(session_pids(self.sid))
        if self.alive():
            targets.add(self.pid)
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        self._popen.poll()
