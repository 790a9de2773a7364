"""``lakemq sql`` and ``lakemq sql-server``: Spark SQL over the lake.

``lakemq sql --lake L "QUERY"`` runs one query; without QUERY it reads statements (ended by
``;``) from stdin on one Spark session, an interactive shell on a terminal
(:mod:`lakemq.cli.sql_shell`). A result is a table when it fits the terminal (or ``$COLUMNS``,
80 in a pipe) with every value whole, else one ``column: value`` line per field
(:func:`lakemq.cli.output.print_rows`): an id or offset is never cut or split. With a name server
(``-n/--namesrv``, or the ``namesrvAddr`` of the broker.conf given with ``-c``, which also gives
``lakeUri`` as the lake) ``messages`` is the live union of the lake and the brokers' hot tails
(:func:`lakemq.jobs.sql.register_live`) and ``messages_lake`` the Delta table alone;
``--lake-only`` (or ``--version``) keeps ``messages`` the Delta table. ``lakemq
sql-server --lake L`` keeps one Spark session up behind Spark Connect, which ``lakemq sql
--remote sc://host:port`` (and any pyspark client) uses without starting a JVM. A failed
statement is one line on stderr; the details go to the log.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.cli import main
from lakemq.cli.output import print_rows
from lakemq.cli.progress import JobProgress
from lakemq.cli.sql_shell import interactive, run_script, run_shell
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError, LakeError
from lakemq.tiering.lake_fs import LakeLocation, parse_storage_options

if TYPE_CHECKING:
    from lakemq.jobs.connect_client import ConnectSession
    from lakemq.jobs.lake_sql import SqlSession

log = logging.getLogger(__name__)


Result = tuple[list[str], list[list[str]], int]  # columns, the first rows, the limit they were cut at


def _show(result: Result) -> None:
    columns, rows, limit = result
    print_rows(columns, rows[:limit])
    more = f" (the first {limit}; more rows exist, see --limit)" if len(rows) > limit else ""
    click.echo(f"{min(len(rows), limit)} row(s){more}")


@dataclass(frozen=True)
class _Live:
    """Where the hot tails come from, when ``messages`` is the live union."""

    namesrv: str
    lake: str
    storage_options: dict[str, str]
    allow_stale: bool
    views: bool  # register the views over the live messages too (not for a statement naming none)

    def stale_note(self) -> str | None:
        """The line saying which brokers an answer lacks, if any could not be asked."""
        from lakemq.jobs.connect_client import allow_numpy

        allow_numpy()  # planning reads the store's queue ends with numpy (on the lake service too)
        from lakemq.jobs.live_filters import Pushed
        from lakemq.jobs.live_plan import LiveOptions, hot_spans, lake_cut, stale_note

        options = LiveOptions(self.namesrv, LakeLocation.of(self.lake, self.storage_options), None, True)
        _, stale = hot_spans(options, lake_cut(options.lake, Pushed()), Pushed())
        return stale_note(stale) if stale else None


def _text(value: Any) -> str:
    """A result's value as it is shown: a map as a dict, a time in this machine's zone (as
    pyspark shows them), NULL for null."""
    if value is None:
        return "NULL"
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return str(value.astimezone().replace(tzinfo=None))
    return str(value)


def _run(session: SqlSession, query: str, limit: int, live: _Live | None = None) -> Result:
    """One statement; a Spark error becomes one LakeError line (the stack goes to the log)."""
    import pyarrow.types

    from lakemq.jobs.lake_sql import session_errors
    from lakemq.jobs.session import lakemq_error_line, spark_error_line

    try:
        table = session.sql(query, limit + 1)
    except session_errors(session) as exc:
        log.exception("query failed: %s", query)
        raise LakeError(f"query failed: {lakemq_error_line(exc) or spark_error_line(exc)}") from exc
    if live is not None and live.allow_stale:
        note = live.stale_note()
        if note:
            click.echo(f"warning: {note}", err=True)
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        values = column.to_pylist()
        if pyarrow.types.is_map(field.type):  # key-value pairs from Arrow: shown as the dict they are
            values = [None if v is None else dict(v) for v in values]
        columns.append([_text(v) for v in values])
    return list(table.column_names), [list(row) for row in zip(*columns, strict=True)], limit


def _live(namesrv: str | None, conf: str | None, lake: str | None, storage_option: tuple[str, ...],
          lake_only: bool, version: int | None, allow_stale: bool, query: str | None
          ) -> tuple[str | None, _Live | None, _Service | None]:
    """The lake to read; unless the Delta table alone is asked for, the live union's source; and
    the conf's lake service, if it names one."""
    from lakemq.jobs.lake_sql import names_live_views

    props = read_broker_conf(conf)
    service = _Service.of(props, lake, version)
    lake = lake or props.get("lakeUri") or None
    namesrv = namesrv or props.get("namesrvAddr") or None
    if lake_only or version is not None or not namesrv or not lake:
        if allow_stale and not lake_only:
            raise ConfigError("--allow-stale-hot-tail needs a name server (-n or -c) and reads the hot tails")
        return lake, None, service
    views = query is None or names_live_views(query)
    return lake, _Live(namesrv, lake, parse_storage_options(storage_option), allow_stale, views), service


@dataclass(frozen=True)
class _Service:
    """broker.conf's lake service (``lakeServiceAddr``: ``tier serve``'s Spark Connect) and, when
    this command cannot use it, why."""

    addr: str
    refuse: str | None

    @classmethod
    def of(cls, props: dict[str, str], lake: str | None, version: int | None) -> _Service | None:
        addr = props.get("lakeServiceAddr", "")
        if not addr:
            return None
        served = props.get("lakeUri", "")
        if lake and (not served or LakeLocation.of(lake).uri != LakeLocation.of(served).uri):
            return cls(addr, f"it serves the conf's lakeUri, not --lake {lake}")
        if version is not None:
            # The pinned snapshot is a set of temporary views made through the JVM's catalog.
            return cls(addr, "--version pins a snapshot in a Spark of its own")
        return cls(addr, None)


def _remote_live(session: ConnectSession, live: _Live) -> None:
    """The live union on a remote session: the service's catalog holds the tables, and the live
    views are this session's own (temporary views and data sources are per session)."""
    from lakemq.jobs.connect_client import ConnectError
    from lakemq.jobs.session import spark_error_line
    from lakemq.jobs.sql import register_remote_live_views

    try:
        register_remote_live_views(session, live.lake, live.namesrv, storage_options=live.storage_options,
                                   allow_stale=live.allow_stale, views=live.views)
    except ConnectError as exc:
        log.exception("registering the live views on the lake service failed")
        raise LakeError(f"cannot register the live views on the lake service: {spark_error_line(exc)}") from exc


def _service_session(service: _Service, progress: JobProgress, live: _Live | None) -> ConnectSession | None:
    """A remote session of the lake service with this command's names, or None (said in one
    progress line) when it cannot be used or does not answer: then Spark starts here."""
    from lakemq.jobs.lake_service import connect

    if service.refuse:
        progress.phase(f"not using the lake service at {service.addr}: {service.refuse}; starting Spark here")
        return None
    progress.phase(f"connecting to the lake service at {service.addr}")
    session, why = connect(service.addr)
    if session is None:
        progress.phase(f"the lake service at {service.addr} is not reachable ({why}): starting Spark here")
        return None
    if live is not None:
        try:
            _remote_live(session, live)
        except BaseException:
            session.close()
            raise
    return session


@contextlib.contextmanager
def _session(lake: str | None, remote: str | None, storage_option: tuple[str, ...], version: int | None,
             master: str | None, progress: JobProgress, live: _Live | None = None,
             service: _Service | None = None) -> Iterator[SqlSession]:
    if remote:
        from lakemq.jobs.connect_client import ConnectError, open_session
        from lakemq.jobs.session import spark_error_line

        if lake or version is not None or master or live is not None:
            raise ConfigError("--remote uses the server's lake and Spark: drop --lake, --version, --master, "
                              "-n and -c")
        progress.phase(f"connecting to {remote}")
        try:
            session = open_session(remote)
        except ConnectError as exc:
            log.exception("connecting to %s failed", remote)
            raise LakeError(f"cannot reach the SQL server at {remote}: {spark_error_line(exc)}") from exc
        try:
            yield session
        finally:
            session.close()
        return
    if service is not None:
        if master and not service.refuse:
            service = _Service(service.addr, "--master asks for a Spark of its own")
        remote_session = _service_session(service, progress, live)
        if remote_session is not None:
            try:
                yield remote_session
            finally:
                remote_session.close()
            return
    from pyspark.sql import SparkSession

    from lakemq.jobs.lake_sql import LocalSql
    from lakemq.jobs.session import build_session, spark_error_line, spark_errors
    from lakemq.jobs.sql import register_live, register_tables

    if not lake:
        raise ConfigError("give --lake (or -c, a broker.conf with lakeUri; or --remote sc://host:port of a "
                          "lakemq sql-server)")
    location = LakeLocation.of(lake, parse_storage_options(storage_option))  # before Spark: a file, not a lake
    owned = SparkSession.getActiveSession() is None
    progress.phase("starting Spark" if owned else "joining the running Spark session")
    spark = build_session(master=master, app_name="lakemq-sql")
    try:
        progress.phase("reading the lake's tables")
        try:
            if live is not None:
                register_live(spark, location.uri, live.namesrv, storage_options=location.options,
                              allow_stale=live.allow_stale, views=live.views)
            else:
                register_tables(spark, location.uri, storage_options=location.options, version=version)
        except spark_errors() as exc:
            log.exception("registering the lake's tables failed")
            line = spark_error_line(exc)
            damaged = " (the lake is damaged, not lakemq: restore that table's _delta_log from a copy)"
            raise LakeError(f"cannot read the lake {lake}: {line}{damaged if '_delta_log' in line else ''}") from exc
        yield LocalSql(spark)
    finally:
        if owned:
            spark.stop()


@main.command("sql")
@click.argument("query", required=False)
@click.option("--lake", help="lake URI (a directory or s3://bucket/prefix)")
@click.option("--remote", help="sc://host:port of a `lakemq sql-server` (Spark Connect) instead of --lake")
@click.option("-n", "--namesrv", help="name server(s), host:port[;...]: messages is the lake plus the brokers' hot tails")
@click.option("-c", "--conf", "conf", type=click.Path(dir_okay=False),
              help="a broker.conf: its namesrvAddr and lakeUri are the defaults of -n and --lake; with "
                   "lakeServiceAddr the query runs on that lake service (`tier serve`) when it answers")
@click.option("--lake-only", is_flag=True, help="messages is the Delta table alone, as messages_lake is")
@click.option("--allow-stale-hot-tail", "allow_stale", is_flag=True,
              help="a broker that cannot be asked leaves its hot tail out (with a warning saying how far "
                   "behind the answer is) instead of failing the query")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--version", "version", type=int, help="read every table and view as of this version of messages")
@click.option("--limit", type=int, default=100, show_default=True, help="rows to print per statement")
@click.option("--master", help="Spark master")
def sql_cmd(query: str | None, lake: str | None, remote: str | None, namesrv: str | None, conf: str | None,
            lake_only: bool, allow_stale: bool, storage_option: tuple[str, ...], version: int | None, limit: int,
            master: str | None) -> None:
    """Run Spark SQL over the lake's Delta tables (messages, transactions, delay_sweep) and views
    (user_messages, schedule_messages, transactions_half/_op/_derived). With a name server (-n, or
    -c's namesrvAddr) messages also holds every acknowledged message not tiered yet, read from the
    brokers; messages_lake is the Delta table alone. Without QUERY, statements ended by ';' are
    read from stdin on one Spark session: a shell on a terminal (line editing, history in
    ~/.lakemq/sql_history)."""
    path = setup_logging("lakemq-sql")
    lake, live, service = _live(namesrv, conf, lake, storage_option, lake_only, version, allow_stale, query)
    with contextlib.ExitStack() as stack:
        with JobProgress() as progress:  # while Spark starts and the query runs, not in the shell
            session = stack.enter_context(_session(lake, remote, storage_option, version, master, progress, live,
                                                   service))
            if query is not None:
                progress.phase("running the query")
                result = _run(session, query, limit, live)
        if query is not None:
            _show(result)
            return
        def run(statement: str) -> None:
            _show(_run(session, statement, limit, live))

        if interactive():
            run_shell(run)
            return
        failed = run_script(iter(sys.stdin.readline, ""), run)
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
    # Progress until the port opens; the ready line comes after it, on stdout.
    with JobProgress() as progress:
        try:
            spark, names = start_server(lake, host=host, port=port, master=master,
                                        storage_options=parse_storage_options(storage_option), phase=progress.phase)
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
