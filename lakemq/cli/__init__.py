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

# Modules that add commands to ``main``; imported lazily so `lakemq --help` stays fast.
COMMAND_MODULES: tuple[str, ...] = ("lakemq.cli.client_cmds", "lakemq.cli.server_cmds", "lakemq.cli.broker_cmds",
                                     "lakemq.cli.lake_cmds", "lakemq.cli.sql_cmds", "lakemq.cli.demo_cmds",
                                     "lakemq.cli.message_cmds", "lakemq.cli.replay_cmds",
                                     "lakemq.cli.transaction_cmds",
                                     "lakemq.cli.console_cmds", "lakemq.cli.reindex_cmds")


class LakeMQGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except LakeMQError as exc:
            log.exception("command failed")
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:
            log.exception("command failed")
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # a fault of ours is still one line for the user
            log.exception("command failed unexpectedly")
            click.echo(f"error: {type(exc).__name__}: {exc} (a lakemq fault; the traceback is in "
                       f"{_log_file() or 'the log'})", err=True)
            sys.exit(1)


def _log_file() -> str | None:
    """The file this process logs to (set up by the command), if any."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, "_lakemq", False):
            return str(getattr(handler, "baseFilename", "")) or None
    return None


@click.group(cls=LakeMQGroup)
@click.version_option(__version__, prog_name="lakemq")
def main() -> None:
    """lakemq: a RocketMQ-compatible broker whose history lives in a Delta lake."""


for _module in COMMAND_MODULES:
    importlib.import_module(_module)
