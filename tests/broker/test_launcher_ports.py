"""The launcher's ports: a restarted server must get its port back, and a first start must not
fail because something took its port in the meantime."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lakemq.launcher import ServerProcess, _ephemeral_low, _on_a_free_port, reserved_port


def test_reserved_port_and_its_ha_and_metrics_ports_are_free_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert _ephemeral_low() == low
    for _ in range(20):
        port = reserved_port()
        assert 20000 <= port and port + 2 < low
        for p in (port - 2, port, port + 1, port + 2):  # listen port, default VIP, HA and metrics ports
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", p))


def test_a_port_the_kernel_hands_out_is_never_reserved() -> None:
    """Outgoing connections take ephemeral ports; a reserved port is never one of them."""
    listener = socket.create_server(("127.0.0.1", 0))
    clients = [socket.create_connection(listener.getsockname()) for _ in range(50)]
    try:
        taken = {c.getsockname()[1] for c in clients}
        low = _ephemeral_low()
        assert all(port >= low for port in taken)
        assert all(reserved_port() + 2 < low for _ in range(50))
    finally:
        for c in clients:
            c.close()
        listener.close()


@pytest.mark.parametrize("error", [
    "[Errno 98] Address already in use",
    # asyncio's words for a listener's bind (a slave's first start failed on these once)
    "[Errno 98] error while attempting to bind on address ('127.0.0.1', 27570): address already in use",
])
def test_a_first_start_moves_to_another_port_when_its_port_was_taken(error: str) -> None:
    tried: list[int] = []

    def start(port: int) -> ServerProcess:
        tried.append(port)
        if len(tried) == 1:
            raise RuntimeError(f"namesrv did not boot (exit 1):\nerror: {error}")
        return ServerProcess("namesrv", None, f"127.0.0.1:{port}", Path("."))  # type: ignore[arg-type]

    server = _on_a_free_port(start)
    assert len(tried) == 2 and server.port == tried[1]


def test_other_boot_failures_are_not_retried() -> None:
    tried: list[int] = []

    def start(port: int) -> ServerProcess:
        tried.append(port)
        raise RuntimeError("broker-a did not boot (exit 1):\nerror: corrupt CommitLog")

    with pytest.raises(RuntimeError, match="corrupt CommitLog"):
        _on_a_free_port(start)
    assert len(tried) == 1
