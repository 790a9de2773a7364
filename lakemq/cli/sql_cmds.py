"""``lakemq sql`` and ``lakemq sql-server``: Spark SQL over the lake.

``lakemq sql --lake L "QUERY"`` runs one query; without QUERY it reads statements (ended by
``;``) from stdin on one Spark session, an interactive shell on a terminal
(:mod:`lakemq.cli.sql_shell`). A result is a table when it fits the terminal (or ``$COLUMNS``,
80 in a pipe) with every value whole, else one ``column: value`` line per field
(:func:`lakemq.cli.output.print_rows`): an id or offset is never cut or split. ``lakemq
sql-server --lake L`` keeps one Spark session up behind Spark Connect, which ``lakemq sql
--remote sc://host:port`` (and any pyspark client) uses without starting a JVM. A failed
statement is one line on stderr; the details go to the log.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import click

from lakemq.cli import main
from lakemq.cli.lake_cmds import parse_storage_options
from lakemq.cli.output import print_rows
from lakemq.cli.sql_shell import interactive, run_script, run_shell
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError, LakeError

log = logging.getLogger(__name__)


def _show(df: Any, limit: int) -> None:
    rows = df.limit(limit + 1).collect()
    print_rows(df.columns, [["NULL" if v is None else str(v) for v in row] for row in rows[:limit]])
    more = f" (the first {limit}; more rows exist, see --limit)" if len(rows) > limit else ""
    click.echo(f"{min(len(rows), limit)} row(s){more}")


def _run(spark: Any, query: str, limit: int) -> None:
    """One statement; a Spark error becomes one LakeError line (the stack goes to the log)."""
    from lakemq.jobs.session import spark_error_line, spark_errors

    try:
        _show(spark.sql(query), limit)
    except spark_errors() as exc:
        log.exception("query failed: %s", query)
        raise LakeError(f"query failed: {spark_error_line(exc)}") from exc


@contextlib.contextmanager
def _session(lake: str | None, remote: str | None, storage_option: tuple[str, ...], version: int | None,
             master: str | None) -> Iterator[Any]:
    from lakemq.jobs.session import spark_error_line, spark_errors

    if remote:
        from lakemq.jobs.sql_server import remote_session

        if lake or version is not None or master:
            raise ConfigError("--remote uses the server's lake and Spark: drop --lake, --version and --master")
        spark = remote_session(remote)
        try:
            yield spark
        finally:
            spark.stop()
        return
    from pyspark.sql import SparkSession

    from lakemq.jobs.session import build_session
    from lakemq.jobs.sql import register_tables

    if not lake:
        raise ConfigError("give --lake (or --remote sc://host:port of a lakemq sql-server)")
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master=master, app_name="lakemq-sql")
    try:
        try:
            register_tables(spark, lake, storage_options=parse_storage_options(storage_option), version=version)
        except spark_errors() as exc:
            log.exception("registering the lake's tables failed")
            raise LakeError(f"cannot read the lake {lake}: {spark_error_line(exc)}") from exc
        yield spark
    finally:
        if owned:
            spark.stop()


@main.command("sql")
@click.argument("query", required=False)
@click.option("--lake", help="lake URI (a directory or s3://bucket/prefix)")
@click.option("--remote", help="sc://host:port of a `lakemq sql-server` (Spark Connect) instead of --lake")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--version", "version", type=int, help="read every table and view as of this version of messages")
@click.option("--limit", type=int, default=100, show_default=True, help="rows to print per statement")
@click.option("--master", help="Spark master")
def sql_cmd(query: str | None, lake: str | None, remote: str | None, storage_option: tuple[str, ...],
            version: int | None, limit: int, master: str | None) -> None:
    """Run Spark SQL over the lake's Delta tables (messages, transactions, delay_sweep) and views
    (user_messages, schedule_messages, transactions_half/_op/_derived). Without QUERY, statements
    ended by ';' are read from stdin on one Spark session: a shell on a terminal (line editing,
    history in ~/.lakemq/sql_history)."""
    path = setup_logging("lakemq-sql")
    with _session(lake, remote, storage_option, version, master) as spark:
        if query is not None:
            _run(spark, query, limit)
            return
        if interactive():
            run_shell(lambda statement: _run(spark, statement, limit))
            return
        failed = run_script(iter(sys.stdin.readline, ""), lambda statement: _run(spark, statement, limit))
        if failed:
            raise LakeError(f"{failed} statement(s) failed (details in {path})")


@main.command("sql-server")
@click.option("--lake", required=True, help="lake URI (a directory or s3://bucket/prefix)")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--host", default="127.0.0.1", show_default=True, help="address Spark Connect listens on")
@click.option("--port", type=int, default=15002, show_default=True, help="Spark Connect port")
@click.option("--master", help="Spark master")
def sql_server_cmd(lake: str, storage_option: tuple[str, ...], host: str, port: int, master: str | None) -> None:
    """Keep one Spark session up with the lake's tables, for `lakemq sql --remote` and any Spark
    Connect client, until SIGTERM or Ctrl-C."""
    from lakemq.jobs.session import spark_error_line, spark_errors
    from lakemq.jobs.sql_server import start_server, stop_server

    setup_logging("lakemq-sql-server")
    try:
        spark, names = start_server(lake, host=host, port=port, master=master,
                                    storage_options=parse_storage_options(storage_option))
    except spark_errors() as exc:
        log.exception("starting the SQL server failed")
        raise LakeError(f"cannot start the SQL server: {spark_error_line(exc)}") from exc
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"lakemq sql-server ready on sc://{host}:{port} (lake {lake}; {', '.join(names)})")
    sys.stdout.flush()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        stop_server(spark)
