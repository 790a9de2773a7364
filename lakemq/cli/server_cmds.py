"""`lakemq namesrv`: run a name server in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import click

from lakemq.cli import main
from lakemq.namesrv import load_namesrv_config, run_namesrv


@main.command()
@click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="namesrv.conf (RocketMQ key=value style)")
@click.option("--port", "-p", type=click.IntRange(0, 65535), default=None,
              help="listen port, overrides listenPort (default 9876)")
@click.option("--host", default=None, help="listen address, overrides listenHost (default 127.0.0.1)")
@click.option("--log-dir", type=click.Path(file_okay=False), default=None,
              help="directory for namesrv.log, overrides logDir")
def namesrv(config_path: Path | None, port: int | None, host: str | None, log_dir: str | None) -> None:
    """Run a name server: broker registration, topic routes, KV config."""
    overrides: dict[str, object] = {}
    if port is not None:
        overrides["listen_port"] = port
    if host is not None:
        overrides["listen_host"] = host
    if log_dir is not None:
        overrides["log_dir"] = log_dir
    run_namesrv(load_namesrv_config(config_path, **overrides))
