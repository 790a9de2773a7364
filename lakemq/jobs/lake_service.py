"""The lake service: ``tier serve``'s one warm Spark session, also serving Spark Connect.

A lake command that starts its own driver pays Spark's start and warm-up (about 25 s end to end
for one aggregate on an idle machine). ``tier serve`` keeps a session up anyway, so with
``lakeServiceAddr`` (broker.conf) set it registers the lake's tables in that session's catalog
(:func:`lakemq.jobs.sql.register_tables`) and opens Spark Connect on that address
(:func:`lakemq.jobs.sql_server.start_connect`). The port opens only once the tables are
registered, so a client that connects as soon as it can never misses a name; a lake with no
``messages`` table yet (nothing tiered) opens it after the first pass that commits one.

Clients (:func:`connect`): ``lakemq sql -c broker.conf`` and ``replay`` / ``admin message query
--lake`` given ``--service`` use it when it answers, and otherwise say so in one progress line
and start their own driver. They talk to it with lakemq's own Spark Connect client
(:mod:`lakemq.jobs.connect_client`: SQL in, Arrow out, no pandas), so each read is SQL. Every
Connect client session shares the catalog's tables and views; ``messages`` as the live union
is a temporary view over the ``lakemq`` Python data source, which is per session, so ``lakemq
sql`` creates it on its own remote session with SQL alone
(:func:`lakemq.jobs.sql.register_remote_live_views`: the source by a reference to its class,
which the service's Python workers import, then the views' SQL). A plain pyspark client sees
``messages`` as the Delta table. This module imports nothing of the lake's schemas (pyarrow) at
the top: a client imports it before its session keeps numpy out.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import TYPE_CHECKING

from lakemq.tiering.lake_fs import LakeLocation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakemq.jobs.connect_client import ConnectSession

__all__ = ["LakeService", "connect", "query_slot", "service_url", "split_addr", "warm", "warm_clients"]

log = logging.getLogger(__name__)

# How long a client waits for the service's port before starting its own driver: loopback or a
# LAN answers in milliseconds; a closed port is refused at once.
CONNECT_TIMEOUT_S = 1.0


_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)(,\d+)?\])?")


def query_slot(master: str) -> dict[str, str]:
    """Settings giving a session on a local ``master`` one task slot more than its jobs plan
    tasks for (``spark.default.parallelism``), kept for the service's queries; none for a
    cluster's master. A tier pass plans a task per slot, each a share of the range, and Spark
    neither starts a task on a busy slot nor preempts one: in FAIR mode too a query waited for
    a pass's task to end. With the spare slot it starts at once, sharing the cores."""
    local = _LOCAL_MASTER.fullmatch(master.strip())
    if local is None:
        return {}
    threads, failures = local.group(1) or "1", local.group(2) or ""
    slots = len(os.sched_getaffinity(0)) if threads == "*" else int(threads)  # as the JVM counts cores
    return {"spark.master": f"local[{slots + 1}{failures}]", "spark.default.parallelism": str(slots)}


def split_addr(addr: str) -> tuple[str, int]:
    """(host, port) of ``host:port`` or ``sc://host:port``."""
    host, _, port = addr.removeprefix("sc://").rstrip("/").rpartition(":")
    return host, int(port)


def service_url(addr: str) -> str:
    host, port = split_addr(addr)
    return f"sc://{host}:{port}"


def warm(spark: SparkSession, lake: LakeLocation) -> None:
    """One small query on the lake's ``messages`` table, if it has one: the JVM's first Delta
    read (class loading, the JIT, the log's first replay) is its slowest, and a long-running
    process pays it at start rather than in its first tier pass or its first client's query."""
    from lakemq.jobs.lake_tables import read_table, table_exists
    from lakemq.tiering.tables import MESSAGES_TABLE

    if table_exists(lake, MESSAGES_TABLE):
        read_table(spark, lake, MESSAGES_TABLE).select("commitlog_offset").limit(1).collect()


def warm_clients(addr: str, lake: LakeLocation, namesrv: str) -> None:
    """One read of the live ``messages`` through the service's own Spark Connect, as a client's
    first query makes it: its Python worker daemons (the ``lakemq`` source's creation, filter
    pushdown and planning, and the readers) start now rather than in that query. Spark keeps
    one daemon per kind and environment for the whole JVM, and Connect sessions run with an
    environment of their own (a warm-up in the tier passes' session would start others)."""
    from lakemq.jobs.connect_client import open_session
    from lakemq.jobs.sql import register_remote_live_views
    from lakemq.tiering.tables import MESSAGES_TABLE

    session = open_session(service_url(addr))
    try:
        register_remote_live_views(session, lake.uri, namesrv, storage_options=lake.options, views=False)
        # A filter, as a client's query has: Spark starts the filter pushdown worker only for one.
        session.sql(f"SELECT commitlog_offset FROM {MESSAGES_TABLE} WHERE store_timestamp >= 0", limit=1)
    finally:
        session.close()


class LakeService:
    """Spark Connect on ``addr`` from ``spark``, opened by :meth:`open_when_ready` once the lake
    has its ``messages`` table and the tables are registered; :meth:`close` closes the port.
    With ``namesrv`` (the live union's brokers) it warms the clients' path once it opens
    (:func:`warm_clients`)."""

    def __init__(self, spark: SparkSession, lake: LakeLocation, addr: str, namesrv: str | None = None) -> None:
        self.spark, self.lake, self.addr, self.namesrv = spark, lake, addr, namesrv
        self.names: list[str] | None = None  # the registered names, once open

    def open_when_ready(self) -> bool:
        """Register the tables and open the port if the lake is ready and it is not open yet;
        whether it opened now. Once open, register them again: a table a sweep wrote since
        (``transactions``, ``delay_sweep``) joins the catalog (the others are left as they are)."""
        from lakemq.jobs.lake_tables import table_exists
        from lakemq.jobs.sql import register_tables
        from lakemq.jobs.sql_server import start_connect
        from lakemq.tiering.tables import MESSAGES_TABLE

        if self.names is not None:
            self.names = register_tables(self.spark, self.lake.uri, storage_options=self.lake.options)
            return False
        if not table_exists(self.lake, MESSAGES_TABLE):
            return False
        names = register_tables(self.spark, self.lake.uri, storage_options=self.lake.options)
        start_connect(self.spark, *split_addr(self.addr))
        self.names = names
        if self.namesrv:
            from lakemq.jobs.connect_client import ConnectError

            try:
                warm_clients(self.addr, self.lake, self.namesrv)
            except ConnectError:  # the service works without it; its first query pays the starts
                log.warning("warming the lake service's clients' path failed", exc_info=True)
        return True

    def close(self) -> None:
        from lakemq.jobs.sql_server import stop_connect

        if self.names is not None:
            stop_connect(self.spark)
            self.names = None


def connect(addr: str) -> tuple[ConnectSession | None, str]:
    """(a Spark Connect session on the service at ``addr``, "") when it answers, else (None, why
    not). The port is tried first, so a service that is down costs no client import."""
    host, port = split_addr(addr)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    from lakemq.jobs.connect_client import ConnectError, open_session

    try:
        return open_session(service_url(addr)), ""
    except ConnectError as exc:  # a port that is not Spark Connect
        return None, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
