"""One Spark session for many queries: a Spark Connect server with the lake's tables registered.

``lakemq sql-server --lake L`` starts Spark in its own process, registers the lake's tables and
views in the session catalog (:func:`lakemq.jobs.sql.register_tables`), and only then starts
Spark Connect's service (``SparkConnectService``, shipped in pyspark's jars; the service
``spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin`` would start with the
context, before the tables exist). So the port accepts connections only once every name
resolves: a client that connects as soon as it can never sees TABLE_OR_VIEW_NOT_FOUND.
Every Spark Connect client sees the tables: ``lakemq sql --remote sc://host:port "..."`` (lakemq's
own client, :mod:`lakemq.jobs.connect_client`), or any pyspark program with
``SparkSession.builder.remote("sc://host:port")``. The catalog is
shared by all the server's sessions, so they are catalog tables and views, not temporary
views.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lakemq.jobs.session import build_session
from lakemq.jobs.sql import register_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONNECT_SERVICE", "start_connect", "start_server", "stop_connect", "stop_server"]

CONNECT_SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService"


def _service(spark: SparkSession) -> Any:
    jvm: Any = spark.sparkContext._jvm
    return getattr(jvm, CONNECT_SERVICE)


def start_connect(spark: SparkSession, host: str, port: int) -> None:
    """Open Spark Connect on ``host:port`` for the running ``spark``: every client session shares
    its catalog (tables and catalog views), not its temporary views. The service reads its
    address from SparkEnv's conf when it starts, so a session built without it (``tier serve``'s)
    serves too; a port in use is an error, not a silent move to the next one."""
    conf: Any = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get().conf()  # type: ignore[union-attr]
    conf.set("spark.connect.grpc.binding.address", host)
    conf.set("spark.connect.grpc.binding.port", str(port))
    conf.set("spark.connect.grpc.port.maxRetries", "0")
    _service(spark).start(spark.sparkContext._jsc.sc())


def stop_connect(spark: SparkSession) -> None:
    """Close the Connect port (a no-op when it was not opened); the session keeps running."""
    service = _service(spark)
    service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())


def start_server(lake_uri: str, *, host: str, port: int, master: str | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 phase: Callable[[str], None] = lambda _: None) -> tuple[SparkSession, list[str]]:
    """Spark with the lake's tables registered, then a Connect endpoint on ``host:port``;
    returns the session (:func:`stop_server` stops both) and the registered names. ``phase``
    hears each stretch of the start as it begins."""
    phase(f"starting Spark ({master})" if master else "starting Spark")
    spark = build_session(master=master, app_name="lakemq-sql-server")
    try:
        phase("registering the lake's tables")
        names = register_tables(spark, lake_uri, storage_options=storage_options)
        phase(f"opening Spark Connect on {host}:{port}")
        start_connect(spark, host, port)
    except BaseException:
        stop_server(spark)
        raise
    return spark, names


def stop_server(spark: SparkSession) -> None:
    """Stop the Connect endpoint (a no-op when it did not start) and the session."""
    stop_connect(spark)
    spark.stop()
