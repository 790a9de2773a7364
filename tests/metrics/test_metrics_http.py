"""The metrics endpoint serves scrapes and stops at once (a broker's or NameServer's stop
waits for it)."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from lakemq.common.metrics_http import start_metrics_server


def test_scrapes_then_a_shutdown_that_does_not_wait_for_a_poll() -> None:
    registry = CollectorRegistry()
    Counter("lakemq_probe", "a counter to find in the scrape", registry=registry).inc(3)
    server = start_metrics_server(registry, "127.0.0.1", 0)
    with urllib.request.urlopen(server.url, timeout=10) as response:
        assert "lakemq_probe_total 3.0" in response.read().decode()
    started = time.monotonic()
    server.shutdown()
    # serve_forever would take its 0.5 s poll here: the thread was just back in select().
    assert time.monotonic() - started < 0.25
    assert not server.thread.is_alive()
    host, port = server.address.split(":")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5)
