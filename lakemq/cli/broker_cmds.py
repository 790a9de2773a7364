"""`lakemq broker`: run a broker until SIGTERM or SIGINT, then shut it down cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import click

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.broker.broker_controller import BrokerController
from lakemq.broker.config import BrokerConfig
from lakemq.broker.ha.config import HaConfig, check_role
from lakemq.cli import main
from lakemq.common.config import bind
from lakemq.common.heap import fix_mmap_threshold
from lakemq.common.logs import setup_logging
from lakemq.remoting import event_loop
from lakemq.store.config import StoreConfig, store_root

__all__ = ["broker", "load_broker_configs"]

log = logging.getLogger(__name__)

def load_broker_configs(
    config_path: str | None,
    *,
    data_dir: str | None = None,
    port: int | None = None,
    namesrv: str | None = None,
) -> tuple[BrokerConfig, StoreConfig, HaConfig]:
    """BrokerConfig, StoreConfig and HaConfig from a broker.conf (or embedded defaults) plus
    the command line's overrides. The store root is :func:`lakemq.store.config.store_root`'s:
    ``--data-dir``, else the conf's ``storePathRootDir``, else ``~/lakemq-data`` (the jobs
    resolve it the same way). A SLAVE without a brokerId > 0 is a ConfigError."""
    props = read_broker_conf(config_path)
    broker_overrides: dict[str, object] = {}
    if port is not None:
        broker_overrides["listen_port"] = port
    if namesrv is not None:
        broker_overrides["namesrv_addr"] = tuple(a.strip() for a in namesrv.split(";") if a.strip())
    broker_config = bind(BrokerConfig, props, **broker_overrides)
    store_config = bind(StoreConfig, props, store_path_root_dir=str(store_root(props, data_dir)))
    return check_role(broker_config, store_config), store_config, bind(HaConfig, props)


async def _serve(controller: BrokerController) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await controller.start()
        c = controller.broker_config
        # The line scripts and test fixtures wait for (RocketMQ prints the same).
        click.echo(
            f"The broker[{c.broker_name}, {controller.broker_addr}] boot success. "
            f"serializeType=JSON and name server is {';'.join(c.namesrv_addr)}"
            + (f", metrics {controller.metrics_server.url}" if controller.metrics_server else ""),
            nl=True,
        )
        await stop.wait()
    finally:
        await controller.shutdown()


@main.command()
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="broker.conf (RocketMQ key=value); embedded defaults without it",
)
@click.option("--data-dir", type=click.Path(file_okay=False), help="store root directory [~/lakemq-data]")
@click.option("--port", type=click.IntRange(0, 65535), help="listen port (0 picks a free one) [listenPort]")
@click.option("--namesrv", "-n", help="name server address(es), host:port;host:port [namesrvAddr]")
@click.option(
    "--log-dir", type=click.Path(file_okay=False), help="log directory [$LAKEMQ_LOG_DIR or ~/logs/lakemq]"
)
def broker(
    config_path: str | None, data_dir: str | None, port: int | None, namesrv: str | None, log_dir: str | None
) -> None:
    """Run a broker: the hot store behind RocketMQ's remoting protocol."""
    broker_config, store_config, ha_config = load_broker_configs(
        config_path, data_dir=data_dir, port=port, namesrv=namesrv
    )
    log_path = setup_logging(
        f"broker-{broker_config.broker_name}", log_dir or os.environ.get("LAKEMQ_LOG_DIR")
    )
    log.info("starting broker with %s, %s and %s", broker_config, store_config, ha_config)
    click.echo(f"logging to {log_path}")
    fix_mmap_threshold()  # a heap that does not creep over hours (lakemq.common.heap)
    event_loop.run(_serve(BrokerController(broker_config, store_config, ha_config)))
