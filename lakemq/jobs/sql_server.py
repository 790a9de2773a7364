"""One Spark session for many queries: a Spark Connect server with the lake's tables registered.

``lakemq sql-server --lake L`` starts Spark in its own process with Spark Connect's plugin
(``org.apache.spark.sql.connect.SparkConnectPlugin``, shipped in pyspark's jars) and registers
the lake's tables and views in the session catalog (:func:`lakemq.jobs.sql.register_tables`).
Every Spark Connect client sees them: ``lakemq sql --remote sc://host:port "..."``, or any
pyspark program with ``SparkSession.builder.remote("sc://host:port")``. The catalog is shared
by all the server's sessions, so they are catalog tables and views, not temporary views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakemq.jobs.session import build_session
from lakemq.jobs.sql import register_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONNECT_PLUGIN", "remote_session", "start_server"]

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


def start_server(lake_uri: str, *, host: str, port: int, master: str | None = None,
                 storage_options: Mapping[str, str] | None = None) -> tuple[SparkSession, list[str]]:
    """Spark with a Connect endpoint on ``host:port`` and the lake's tables registered;
    returns the session (stop it to stop the server) and the registered names."""
    spark = build_session(master=master, app_name="lakemq-sql-server", conf={
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    })
    try:
        names = register_tables(spark, lake_uri, storage_options=storage_options)
    except BaseException:
        spark.stop()
        raise
    return spark, names


def remote_session(url: str) -> SparkSession:
    """A Spark Connect client session (``sc://host:port``); no JVM in this process."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()
