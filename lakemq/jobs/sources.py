"""lakemq's PySpark data sources, ``commitlog`` and ``lakemq``, and registering them on a session.

The two :class:`DataSource` classes are only their names, their schema and their readers'
constructors; the readers (:mod:`lakemq.jobs.commitlog_source`, :mod:`lakemq.jobs.live_source`,
:mod:`lakemq.jobs.live_stream`) are imported where they run, in Spark's Python workers. A
Spark Connect client (``lakemq sql`` on the lake service) registers ``lakemq`` on its remote
session by reference to its class (:data:`lakemq.jobs.sql.LIVE_SOURCE`), importing neither
this module nor pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from lakemq.jobs.sql import FILTER_PUSHDOWN
from lakemq.tiering.tables import SPARK_DDL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FILTER_PUSHDOWN", "CommitLogDataSource", "LiveDataSource", "register_sources"]


class CommitLogDataSource(DataSource):
    """Sealed CommitLog segments as ``messages`` rows (:mod:`lakemq.jobs.commitlog_source`)."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> str:
        return SPARK_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from lakemq.jobs.commitlog_source import CommitLogReader

        return CommitLogReader(dict(self.options))


class LiveDataSource(DataSource):
    """A topic's messages across the lake and the live brokers (:mod:`lakemq.jobs.live_source`)."""

    @classmethod
    def name(cls) -> str:
        return "lakemq"

    def schema(self) -> str:
        return SPARK_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from lakemq.jobs.live_columns import columns_of
        from lakemq.jobs.live_source import LiveReader

        return LiveReader(dict(self.options), columns_of(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from lakemq.jobs.live_columns import columns_of
        from lakemq.jobs.live_stream import LiveStreamReader

        return LiveStreamReader(dict(self.options), columns_of(schema))


def register_sources(spark: SparkSession) -> None:
    """Make ``spark.read.format("commitlog")`` and ``spark.read.format("lakemq")`` available."""
    spark.conf.set(FILTER_PUSHDOWN, "true")
    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(LiveDataSource)
