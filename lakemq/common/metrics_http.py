"""Serve a process's Prometheus registry over HTTP (``GET /metrics``).

prometheus_client's own threaded WSGI server runs on a daemon thread, so a scrape (and the
state collectors it runs) never touches the server's asyncio loop.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["MetricsServer", "metrics_port_for", "start_metrics_server"]

log = logging.getLogger(__name__)


def metrics_port_for(metrics_port: int, listen_port: int) -> int | None:
    """The port to bind from a ``metricsPort`` key: -1 = listen port + 2 (a free port when the
    listen port is itself 0), 0 = a free port, -2 = off (None), else that port."""
    if metrics_port == -2:
        return None
    if metrics_port == -1:
        return listen_port + 2 if listen_port else 0
    return metrics_port


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        # A bound TCP socket names its host as str; typeshed's type also allows bind()'s bytes.
        assert isinstance(host, str)
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Bind ``host:port`` (0 picks a free port) and serve ``registry`` on a daemon thread."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    metrics = MetricsServer(server, thread)
    log.info("metrics on %s", metrics.url)
    return metrics
