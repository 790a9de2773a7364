"""Registering lakemq's PySpark data sources on a session."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register_sources"]


def register_sources(spark: SparkSession) -> None:
    """Make ``spark.read.format("commitlog")`` (lakemq.jobs.commitlog_source) available."""
    from lakemq.jobs.commitlog_source import CommitLogDataSource

    spark.dataSource.register(CommitLogDataSource)
