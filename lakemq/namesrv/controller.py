"""NamesrvController: the name server's parts wired together, and the process entry point."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from lakemq.common.logs import setup_logging
from lakemq.common.metrics_http import MetricsServer, metrics_port_for, start_metrics_server
from lakemq.namesrv.config import NamesrvConfig
from lakemq.namesrv.kv_config import KVConfigManager
from lakemq.namesrv.metrics import NamesrvMetrics
from lakemq.namesrv.processor import NamesrvProcessor
from lakemq.namesrv.route_info import RouteInfoManager
from lakemq.remoting import event_loop
from lakemq.remoting.server import RemotingServer

__all__ = ["NamesrvController", "run_namesrv"]

log = logging.getLogger(__name__)


class NamesrvController:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager(default_timeout_millis=config.broker_channel_expired_millis)
        self.kv = KVConfigManager(config.kv_path)
        self.server = RemotingServer(config.server_config())
        self.metrics = NamesrvMetrics(self.routes)
        self.metrics_server: MetricsServer | None = None
        self._scan_task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        await asyncio.to_thread(self.kv.load)
        processor = NamesrvProcessor(self.routes, self.kv,
                                     order_message_enable=self.config.order_message_enable,
                                     metrics=self.metrics)
        for code in processor.codes:
            self.server.register_processor(code, processor)
        self.server.add_close_listener(self.routes.on_connection_closed)
        await self.server.start()
        port = metrics_port_for(self.config.metrics_port, self.server.port if self.config.listen_port else 0)
        if port is not None:
            self.metrics_server = start_metrics_server(self.metrics.registry, self.config.listen_host, port)
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())
        log.info("name server started on %s", self.address)

    async def shutdown(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.gather(self._scan_task, return_exceptions=True)
            self._scan_task = None
        await self.server.shutdown()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        log.info("name server stopped")

    async def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.routes.scan_not_active_brokers(int(time.time() * 1000))
            except Exception:
                log.exception("scanning for inactive brokers failed")


def run_namesrv(config: NamesrvConfig) -> None:
    """Run a name server until SIGTERM or SIGINT, then stop cleanly."""
    log_path = setup_logging("namesrv", config.log_dir)

    async def main() -> None:
        controller = NamesrvController(config)
        await controller.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        metrics = f", metrics {controller.metrics_server.url}" if controller.metrics_server else ""
        print(f"The Name Server boot success. listening on {controller.address}, log {log_path}{metrics}",
              flush=True)
        try:
            await stop.wait()
        finally:
            await controller.shutdown()

    event_loop.run(main())
