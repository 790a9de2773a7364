"""The ``lakemq`` command: a thin face over the packages.

Each area keeps its commands in its own module here and registers them on ``main``; errors
from lakemq become one line on stderr and a non-zero exit, with the traceback in the log; so
does any other failure (a fault of ours), with the log file named.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from lakemq import __version__
from lakemq.errors import LakeMQError

__all__ = ["main"]

log = logging.getLogger("lakemq.cli")

# The modules that register each command on ``main`` (a group's subcommands may come from
# several), imported only when the command runs: `lakemq namesrv` loads the NameServer, not
# the client, the SQL92 parser, Spark's glue and the console (about 0.8 s of imports, paid by
# every server and tool a cluster starts).
COMMANDS: dict[str, tuple[str, ...]] = {
    "admin": ("lakemq.cli.client_cmds", "lakemq.cli.message_cmds"),
    "broker": ("lakemq.cli.broker_cmds",),
    "console": ("lakemq.cli.console_cmds",),
    "consume": ("lakemq.cli.client_cmds",),
    "demo": ("lakemq.cli.demo_cmds",),
    "namesrv": ("lakemq.cli.server_cmds",),
    "produce": ("lakemq.cli.client_cmds",),
    "reindex": ("lakemq.cli.reindex_cmds",),
    "replay": ("lakemq.cli.replay_cmds",),
    "sql": ("lakemq.cli.sql_cmds",),
    "sql-server": ("lakemq.cli.sql_cmds",),
    "sweep": ("lakemq.cli.replay_cmds", "lakemq.cli.transaction_cmds"),
    "tier": ("lakemq.cli.lake_cmds",),
}


class LakeMQGroup(click.Group):
    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for module in COMMANDS.get(cmd_name, ()):
            importlib.import_module(module)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (LakeMQError, OSError) as exc:
            if _log_file() is not None:  # none yet (a bad broker.conf): see below
                log.exception("command failed")
            click.echo(f"error: {_first_line(exc)}", err=True)
            sys.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # a fault of ours is still one line for the user
            if _log_file() is not None:
                log.exception("command failed unexpectedly")
            click.echo(f"error: {type(exc).__name__}: {_first_line(exc)} (a lakemq fault; the traceback is in "
                       f"{_log_file() or 'the log'})", err=True)
            sys.exit(1)


def _first_line(exc: BaseException) -> str:
    """An error's first line: some carry a whole backtrace in their text (deltalake's)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _log_file() -> str | None:
    """The file this process logs to (set up by the command), if any. A command that failed
    before it set one up (a bad broker.conf) logs nothing: with no handler, Python's
    last-resort handler would print the traceback on stderr above the one-line error."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, "_lakemq", False):
            return str(getattr(handler, "baseFilename", "")) or None
    return None


@click.group(cls=LakeMQGroup)
@click.version_option(__version__, prog_name="lakemq")
def main() -> None:
    """lakemq: a RocketMQ-compatible broker whose history lives in a Delta lake."""

