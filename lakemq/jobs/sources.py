"""Registering lakemq's PySpark data sources on a session."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FILTER_PUSHDOWN", "register_sources"]

# Python data sources see Spark's filters only with this on (the ``lakemq`` source takes them).
FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def register_sources(spark: SparkSession) -> None:
    """Make ``spark.read.format("commitlog")`` (lakemq.jobs.commitlog_source) and
    ``spark.read.format("lakemq")`` (lakemq.jobs.live_source) available."""
    from lakemq.jobs.commitlog_source import CommitLogDataSource
    from lakemq.jobs.live_source import LiveDataSource

    spark.conf.set(FILTER_PUSHDOWN, "true")
    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(LiveDataSource)
