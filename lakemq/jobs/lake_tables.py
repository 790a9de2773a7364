"""The lake's Delta tables as Spark reads and writes them, through Delta Lake's own connector.

Spark reaches a ``s3://bucket/prefix`` lake through Hadoop's S3A connector (``s3a://``), set up
per bucket from the lake's storage options (object_store spelling, the same options deltalake and
s3fs take), so lakes in several buckets can share one session. A local lake is a plain path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakemq.jobs.session import is_remote, require_delta
from lakemq.tiering.lake_fs import LakeLocation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["configure_s3a", "read_table", "spark_uri", "table_exists"]


def spark_uri(lake: LakeLocation, table: str) -> str:
    """The table's location as Spark names it: ``s3a://`` for S3."""
    uri = lake.table_uri(table)
    scheme, sep, rest = uri.partition("://")
    return f"s3a://{rest}" if sep and scheme == "s3" else uri


def configure_s3a(spark: SparkSession, lake: LakeLocation) -> None:
    """Point S3A at the lake's bucket: endpoint, credentials, region (per-bucket keys)."""
    require_delta(spark)
    if lake.is_local:
        return
    scheme, _, rest = lake.uri.partition("://")
    if scheme not in ("s3", "s3a"):
        return
    upper = {k.upper(): v for k, v in lake.options.items()}
    prefix = f"fs.s3a.bucket.{rest.split('/', 1)[0]}."
    settings: dict[str, str] = {}
    endpoint = upper.get("AWS_ENDPOINT_URL") or upper.get("AWS_ENDPOINT")
    if endpoint:
        settings["endpoint"] = endpoint
        # A custom endpoint (MinIO, moto, a private gateway) rarely serves virtual-host buckets.
        settings["path.style.access"] = "true"
        settings["connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    if "AWS_ACCESS_KEY_ID" in upper:
        settings["access.key"] = upper["AWS_ACCESS_KEY_ID"]
        settings["secret.key"] = upper.get("AWS_SECRET_ACCESS_KEY", "")
        settings["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if "AWS_SESSION_TOKEN" in upper:
            settings["session.token"] = upper["AWS_SESSION_TOKEN"]
            settings["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    if "AWS_REGION" in upper:
        settings["endpoint.region"] = upper["AWS_REGION"]
    # SQL conf entries are copied into every Hadoop configuration this session builds; the
    # SparkContext's own configuration serves the other sessions (a Spark Connect server's).
    # A Connect client session has no SparkContext here: its SQL conf reaches the server's.
    hadoop = None if is_remote(spark) else spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        spark.conf.set(prefix + key, value)
        if hadoop is not None:
            hadoop.set(prefix + key, value)


def table_exists(lake: LakeLocation, table: str) -> bool:
    """Whether the lake holds ``table`` (read from its Delta log, no Spark job)."""
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(lake.table_uri(table), storage_options=lake.delta_options()))


def read_table(spark: SparkSession, lake: LakeLocation, table: str, *, version: int | None = None,
               timestamp: str | None = None) -> DataFrame:
    """``spark.read.format("delta")`` of a lake table, at a version or timestamp if given."""
    configure_s3a(spark, lake)
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if timestamp is not None:
        reader = reader.option("timestampAsOf", timestamp)
    return reader.load(spark_uri(lake, table))
