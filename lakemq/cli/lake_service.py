"""The lake service on the command line: ``--service`` and the session a lake command runs on.

A command given a lake service (``tier serve``'s Spark Connect, :mod:`lakemq.jobs.lake_service`)
runs on it when it answers; otherwise, or when it cannot use it, one progress line says so and
Spark starts here as without it. Kept apart from lake_cmds so that ``lakemq admin`` does not
import the tiering commands.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from lakemq.cli.progress import JobProgress
from lakemq.errors import LakeError

if TYPE_CHECKING:
    from lakemq.jobs.lake_sql import SqlSession

log = logging.getLogger(__name__)

__all__ = ["before_lake_imports", "lake_session", "service_option"]


def before_lake_imports(service: str | None, master: str | None) -> None:
    """Call before a command that may run on the lake service imports lakemq's lake modules:
    with a service to ask, numpy stays out of this process (pyarrow imports it, and
    pyarrow.dataset pandas, when they are installed: :func:`lakemq.jobs.connect_client.keep_out_numpy`);
    :func:`lake_session` lets it in again if it starts Spark here instead."""
    if service and not master:
        from lakemq.jobs.connect_client import keep_out_numpy

        keep_out_numpy()


@contextlib.contextmanager
def lake_session(service: str | None, master: str | None, progress: JobProgress) -> Iterator[SqlSession]:
    """The lake service's session (``tier serve``'s Spark Connect, :mod:`lakemq.jobs.lake_service`)
    when ``service`` is given and answers, else a SparkSession of this process
    (:func:`lakemq.cli.lake_cmds.spark_session`), as a :class:`SqlSession` either way: a service
    that is down, or ``--master`` asking for a Spark of its own, is one progress line, then
    Spark starts here as without the service."""
    if service and master:
        progress.phase(f"not using the lake service at {service}: --master asks for a Spark of its own; "
                       "starting Spark here")
    elif service:
        from lakemq.jobs.connect_client import ConnectError
        from lakemq.jobs.lake_service import connect

        progress.phase(f"connecting to the lake service at {service}")
        remote, why = connect(service)
        if remote is not None:
            try:
                yield remote
            except ConnectError as exc:
                log.exception("Spark job failed (lake service %s)", service)
                raise LakeError(f"Spark job failed: {str(exc).splitlines()[0] if str(exc) else exc!r}") from exc
            finally:
                remote.close()
            return
        progress.phase(f"the lake service at {service} is not reachable ({why}): starting Spark here")
    from lakemq.jobs.connect_client import allow_numpy

    allow_numpy()  # a Spark here uses it (see keep_out_numpy)
    from lakemq.cli.lake_cmds import spark_session
    from lakemq.jobs.lake_sql import LocalSql

    with spark_session(master, progress) as spark:
        yield LocalSql(spark)


service_option = click.option(
    "--service", help="host:port (or sc://host:port) of a lake service (`tier serve` with lakeServiceAddr): "
                      "used when it answers, else Spark starts here")
