"""A second test host: a network namespace joined to this one by a veth pair, so a broker in
it talks to the others over a link the test can cut (a partition) or slow down (a token
bucket). Needs root and a kernel that lets it create namespaces (``available()``)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TestHost", "available", "test_host"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str:
    """Empty when namespaces can be made here; else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    probe = f"lmqprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return ""


class TestHost:
    """The namespace ``name``: this host is ``host_ip``, the namespace ``ns_ip``."""

    __test__ = False  # not a pytest class

    def __init__(self, name: str, host_if: str, ns_if: str, host_ip: str, ns_ip: str) -> None:
        self.name, self.host_if, self.ns_if, self.host_ip, self.ns_ip = name, host_if, ns_if, host_ip, ns_ip

    @property
    def prefix(self) -> tuple[str, ...]:
        """What a command is run behind to run in the namespace."""
        return ("ip", "netns", "exec", self.name)

    def partition(self) -> None:
        """Every packet between the two hosts is lost from now on (open connections hang)."""
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def limit(self, rate: str) -> None:
        """Both directions at most ``rate`` (tc's units: "8mbit"); the excess is queued."""
        for command in self._tc("replace", "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "10s"):
            subprocess.run(command, capture_output=True, text=True, check=True, timeout=30)

    def unlimit(self) -> None:
        for command in self._tc("del", "root"):
            subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)

    def _tc(self, verb: str, *args: str) -> list[list[str]]:
        return [["tc", "qdisc", verb, "dev", self.host_if, *args],
                [*self.prefix, "tc", "qdisc", verb, "dev", self.ns_if, *args]]


@contextmanager
def test_host() -> Iterator[TestHost]:
    """A fresh namespace and veth pair on a /24 of its own; removed at the end."""
    n = random.randrange(1, 250)
    tag = f"{os.getpid() % 10000}x{n}"
    host = TestHost(f"lmq{tag}", f"lmq{tag}h", f"lmq{tag}n", f"10.231.{n}.1", f"10.231.{n}.2")
    _ip("netns", "add", host.name)
    try:
        _ip("link", "add", host.host_if, "type", "veth", "peer", "name", host.ns_if)
        _ip("link", "set", host.ns_if, "netns", host.name)
        _ip("addr", "add", f"{host.host_ip}/24", "dev", host.host_if)
        _ip("link", "set", host.host_if, "up")
        _ip("netns", "exec", host.name, "ip", "addr", "add", f"{host.ns_ip}/24", "dev", host.ns_if)
        _ip("netns", "exec", host.name, "ip", "link", "set", host.ns_if, "up")
        _ip("netns", "exec", host.name, "ip", "link", "set", "lo", "up")
        yield host
    finally:
        _ip("link", "del", host.host_if, check=False)
        _ip("netns", "del", host.name, check=False)
