"""The listen backlog of brokers and NameServers (serverSocketBacklog, RocketMQ's 1024): a burst
of clients connecting at once is queued by the kernel instead of waiting a second for a SYN
to be sent again."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.launcher import NAMESRV_READY
from lakemq.remoting import RemotingCommand, SyncRemotingClient
from tests.cluster import ServerProcess, spawn, start_cluster

pytestmark = pytest.mark.timeout(120)

# A connect whose SYN the kernel dropped (accept queue full) is retried after 1 s.
SYN_RETRY_S = 1.0


def connect_burst(addr: str, count: int, timeout: float = 10.0) -> list[float]:
    """Open COUNT connections at once (non-blocking); seconds each took to complete, slowest
    last. A connect still pending at TIMEOUT counts as TIMEOUT."""
    host, port = addr.rsplit(":", 1)
    selector = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    took: list[float] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex((host, int(port)))
            started[sock] = time.monotonic()
            selector.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        while len(took) < count and time.monotonic() < deadline:
            for key, _ in selector.select(0.2):
                sock = key.fileobj  # type: ignore[assignment]
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                took.append(time.monotonic() - started[sock])
                selector.unregister(sock)
        return sorted(took) + [timeout] * (count - len(took))
    finally:
        for sock in started:
            sock.close()
        selector.close()


@contextmanager
def stopped(server: ServerProcess) -> Iterator[None]:
    """SIGSTOP the server: it accepts nothing, only the kernel's queue takes connections."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def answered(addr: str) -> None:
    """A request on a new connection is answered: the accept queue is empty up to it (FIFO)."""
    with SyncRemotingClient() as client:
        response = client.invoke(addr, RemotingCommand.request(9999), 30)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def _somaxconn() -> int:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return 4096


def _need_somaxconn(backlog: int) -> None:
    if _somaxconn() < backlog:
        pytest.skip(f"net.core.somaxconn is {_somaxconn()}: the kernel caps every backlog below {backlog}")


def _queued_while_stopped(server: ServerProcess, count: int) -> float:
    """Seconds the slowest of COUNT connects took while SERVER accepted none: only the kernel's
    accept queue (the listen backlog) can take them, whatever the machine's load."""
    answered(server.addr)  # the server accepted every connect queued before this one
    with stopped(server):
        return connect_burst(server.addr, count, timeout=2 * SYN_RETRY_S)[-1]


def test_the_default_backlog_holds_a_thousand_connects_the_server_has_not_accepted(tmp_path: Path) -> None:
    _need_somaxconn(1024)
    with start_cluster(tmp_path) as cluster:
        assert cluster.namesrv is not None
        for server in (cluster.brokers["broker-a"], cluster.namesrv):
            slowest = _queued_while_stopped(server, 1000)
            assert slowest < SYN_RETRY_S, f"{server.name}: the kernel dropped connects (backlog too small)"


def test_two_thousand_quick_connects_do_not_stall(tmp_path: Path) -> None:
    """2,000 clients connecting at once to a broker and a NameServer whose serverSocketBacklog
    is 2048: none waits for a SYN retry, even with the server not accepting at all."""
    _need_somaxconn(2048)
    with start_cluster(tmp_path, broker_conf={"serverSocketBacklog": "2048"}, with_namesrv=False) as cluster:
        conf = tmp_path / "namesrv.conf"
        conf.write_text("serverSocketBacklog=2048\n")
        namesrv = spawn("namesrv", ["namesrv", "-c", str(conf), "--port", "0", "--log-dir", str(tmp_path / "ns-logs")],
                        tmp_path / "namesrv", NAMESRV_READY)
        try:
            for server in (cluster.brokers["broker-a"], namesrv):
                slowest = _queued_while_stopped(server, 2000)
                assert slowest < SYN_RETRY_S, f"{server.name}: slowest of 2000 connects took {slowest:.2f} s"
        finally:
            assert namesrv.stop() == 0


def test_backlog_is_a_config_key(tmp_path: Path) -> None:
    from lakemq.cli.broker_cmds import load_broker_configs
    from lakemq.errors import ConfigError
    from lakemq.namesrv.config import load_namesrv_config

    conf = tmp_path / "broker.conf"
    conf.write_text("serverSocketBacklog=4096\n")
    broker, _, _ = load_broker_configs(str(conf), data_dir=str(tmp_path / "store"), port=0, namesrv="127.0.0.1:1")
    assert broker.server_socket_backlog == 4096
    assert load_namesrv_config().server_config().backlog == 1024
    conf.write_text("serverSocketBacklog=0\n")
    with pytest.raises(ConfigError, match="server_socket_backlog"):
        load_broker_configs(str(conf), data_dir=str(tmp_path / "store"), port=0, namesrv="127.0.0.1:1")
    (tmp_path / "namesrv.conf").write_text("serverSocketBacklog=2048\n")
    assert load_namesrv_config(tmp_path / "namesrv.conf").server_config().backlog == 2048
