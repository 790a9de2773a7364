"""The launcher's ports: a restarted server must get its port back."""

from __future__ import annotations

import socket
from pathlib import Path

from lakemq.launcher import _ephemeral_low, reserved_port


def test_reserved_port_is_free_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert _ephemeral_low() == low
    for _ in range(20):
        port = reserved_port()
        assert 20000 <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: it binds


def test_a_port_the_kernel_hands_out_is_never_reserved() -> None:
    """Outgoing connections take ephemeral ports; a reserved port is never one of them."""
    listener = socket.create_server(("127.0.0.1", 0))
    clients = [socket.create_connection(listener.getsockname()) for _ in range(50)]
    try:
        taken = {c.getsockname()[1] for c in clients}
        low = _ephemeral_low()
        assert all(port >= low for port in taken)
        assert all(reserved_port() < low for _ in range(50))
    finally:
        for c in clients:
            c.close()
        listener.close()
