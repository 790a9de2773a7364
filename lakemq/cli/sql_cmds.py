"""``lakemq sql`` and ``lakemq sql-server``: Spark SQL over the lake.

``lakemq sql --lake L "QUERY"`` runs one query; without QUERY it reads statements (ended by
``;``) from stdin on one Spark session, an interactive shell on a terminal. ``lakemq
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
from lakemq.cli.progress import JobProgress
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError, LakeError
from lakemq.tiering.lake_fs import LakeLocation

log = logging.getLogger(__name__)

_PROMPT, _MORE = "lakemq-sql> ", "        ...> "


Result = tuple[list[str], list[list[str]], int]  # columns, the first rows, the limit they were cut at


def _show(result: Result) -> None:
    columns, rows, limit = result
    print_rows(columns, rows[:limit])
    more = f" (the first {limit}; more rows exist, see --limit)" if len(rows) > limit else ""
    click.echo(f"{min(len(rows), limit)} row(s){more}")


def _run(spark: Any, query: str, limit: int) -> Result:
    """One statement; a Spark error becomes one LakeError line (the stack goes to the log)."""
    from lakemq.jobs.session import spark_error_line, spark_errors

    try:
        df = spark.sql(query)
        rows = df.limit(limit + 1).collect()
    except spark_errors() as exc:
        log.exception("query failed: %s", query)
        raise LakeError(f"query failed: {spark_error_line(exc)}") from exc
    return list(df.columns), [["NULL" if v is None else str(v) for v in row] for row in rows], limit


def _statements(interactive: bool) -> Iterator[str]:
    """Statements from stdin, each ended by ``;`` (or by the end of input)."""
    lines: list[str] = []
    while True:
        try:
            line = input(_MORE if lines else _PROMPT) if interactive else sys.stdin.readline()
        except EOFError:
            line = ""
            interactive = False
        if not interactive and not line:
            break
        if not lines and line.strip().lower() in ("quit", "exit", "quit;", "exit;"):
            return
        lines.append(line.rstrip("\n"))
        text = "\n".join(lines).strip()
        if text.endswith(";"):
            lines = []
            if text.rstrip(";").strip():
                yield text.rstrip(";").strip()
    if "\n".join(lines).strip():
        yield "\n".join(lines).strip()


@contextlib.contextmanager
def _session(lake: str | None, remote: str | None, storage_option: tuple[str, ...], version: int | None,
             master: str | None, progress: JobProgress) -> Iterator[Any]:
    from lakemq.jobs.session import spark_error_line, spark_errors

    if remote:
        from lakemq.jobs.sql_server import remote_session

        if lake or version is not None or master:
            raise ConfigError("--remote uses the server's lake and Spark: drop --lake, --version and --master")
        progress.phase(f"connecting to {remote}")
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
    location = LakeLocation.of(lake, parse_storage_options(storage_option))  # before Spark: a file, not a lake
    owned = SparkSession.getActiveSession() is None
    progress.phase("starting Spark" if owned else "joining the running Spark session")
    spark = build_session(master=master, app_name="lakemq-sql")
    try:
        progress.phase("reading the lake's tables")
        try:
            register_tables(spark, location.uri, storage_options=location.options, version=version)
        except spark_errors() as exc:
            log.exception("registering the lake's tables failed")
            line = spark_error_line(exc)
            damaged = " (the lake is damaged, not lakemq: restore that table's _delta_log from a copy)"
            raise LakeError(f"cannot read the lake {lake}: {line}{damaged if '_delta_log' in line else ''}") from exc
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
    ended by ';' are read from stdin on one Spark session."""
    path = setup_logging("lakemq-sql")
    with contextlib.ExitStack() as stack:
        with JobProgress() as progress:  # while Spark starts and the query runs, not in the shell
            spark = stack.enter_context(_session(lake, remote, storage_option, version, master, progress))
            if query is not None:
                progress.phase("running the query")
                result = _run(spark, query, limit)
        if query is not None:
            _show(result)
            return
        failed = 0
        for statement in _statements(sys.stdin.isatty()):
            try:
                _show(_run(spark, statement, limit))
            except LakeError as exc:
                failed += 1
                click.echo(f"error: {exc}", err=True)
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
    from lakemq.jobs.sql_server import start_server

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
        spark.stop()
