"""``lakemq console``: the web console, a client of the cluster and a reader of the lake."""

from __future__ import annotations

import asyncio
import signal

import click

from lakemq.cli import main
from lakemq.cli.client_cmds import namesrv_option
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError
from lakemq.tiering.lake_fs import parse_storage_options


def _store_dirs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        broker, sep, path = pair.partition("=")
        if not sep or not broker or not path:
            raise ConfigError(f"--store {pair!r} is not BROKER=DIR")
        out[broker] = path
    return out


@main.command("console")
@namesrv_option
@click.option("--lake", help="lake URI for tiering status and history search (a directory or s3://...)")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--store", "stores", multiple=True,
              help="BROKER=DIR: a broker's store root, when not the storePathRootDir the broker reports")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port")
@click.option("--sample-interval", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="seconds between lag and TPS samples")
@click.option("--refresh", default=0, show_default=True, type=click.IntRange(min=0),
              help="pages reload themselves every N seconds (0: never)")
def console_cmd(namesrv: str, lake: str | None, storage_option: tuple[str, ...], stores: tuple[str, ...],
                host: str, port: int, sample_interval: float, refresh: int) -> None:
    """Serve the web console: cluster, topics, consumer lag, message search over the hot
    tier and the lake, tiering status, dead letters."""
    from aiohttp import web

    from lakemq.console import ConsoleSettings, create_app

    setup_logging("lakemq-console")
    settings = ConsoleSettings(namesrv_addr=namesrv, lake_uri=lake,
                               storage_options=tuple(sorted(parse_storage_options(storage_option).items())),
                               store_dirs=tuple(sorted(_store_dirs(stores).items())),
                               sample_interval_s=sample_interval, refresh_s=refresh)

    async def serve() -> None:
        runner = web.AppRunner(create_app(settings), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0]
            click.echo(f"lakemq console on http://{bound[0]}:{bound[1]}/ (name server {namesrv})", nl=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())
