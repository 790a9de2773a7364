"""Serve a process's Prometheus registry over HTTP (``GET /metrics``).

prometheus_client's threaded WSGI server answers on a daemon thread, so a scrape (and the
state collectors it runs) never touches the server's asyncio loop. The thread waits on the
listening socket and on a wake-up socket, so :meth:`MetricsServer.shutdown` returns at once:
``serve_forever`` would notice a shutdown only at its next half-second poll, and every broker
and NameServer stop would wait for it.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not logged (the base class prints each to stderr)."""


class MetricsServer:
    """``GET /metrics`` on ``host:port`` until :meth:`shutdown`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        # handle_request() waits for a connection itself: one reset before its accept would
        # hold the thread past a wake-up. With a zero timeout it returns instead.
        server_class = type("MetricsHTTPServer", (ThreadingWSGIServer,), {"address_family": family, "timeout": 0})
        self.server: WSGIServer = make_server(host, port, make_wsgi_app(registry), server_class, handler_class=_QuietHandler)
        self._wake, self._waker = socket.socketpair()
        self.thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        # A bound TCP socket names its host as str; typeshed's type also allows bind()'s bytes.
        assert isinstance(host, str)
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.server, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake in ready:
                    return
                self.server.handle_request()  # the listening socket is readable: no wait

    def shutdown(self) -> None:
        self._waker.send(b"\0")
        self.thread.join(5)
        self.server.server_close()
        self._wake.close()
        self._waker.close()


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Bind ``host:port`` (0 picks a free port) and serve ``registry`` on a daemon thread."""
    metrics = MetricsServer(registry, host, port)
    log.info("metrics on %s", metrics.url)
    return metrics
