"""The lake on S3: moto's S3 server in its own process on loopback, reached through s3fs and
deltalake exactly as a real bucket would be (no mocks inside the test process).

The server must not run as a thread of the test process: some deltalake calls block in Rust
while holding the GIL, and a server thread waiting for the GIL would never answer them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from lake_helpers import WriteStore, transaction_rows, user_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.key_index import ensure_key_index, index_complete
from lakemq.jobs.lake_tables import read_table, spark_uri
from lakemq.jobs.message_lookup import find_messages
from lakemq.jobs.sql import run_sql
from lakemq.jobs.transaction_sweep import _write
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.verify import verify_manifest

BROKER = "broker-s3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_options() -> Iterator[dict[str, str]]:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    options = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        # moto has no conditional PUT; a single writer per table makes the rename safe here.
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "timeout": "30s",
    }
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update({k: options[k] for k in saved})
    try:
        import boto3

        boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket="lake-bucket")
        yield options
    finally:
        server.terminate()
        server.wait(10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_compact_to_s3_is_a_delta_table_and_exactly_once(
    spark: Any, store_dir: Path, write_store: WriteStore, s3_options: dict[str, str]
) -> None:
    from deltalake import DeltaTable

    offsets = write_store(user_messages(500))
    lake_uri = "s3://lake-bucket/lake"
    result = compact(spark, store_dir=store_dir, lake_uri=lake_uri, broker_name=BROKER, seal_idle_ms=0,
                     storage_options=s3_options)
    assert result.rows == len(offsets)
    location = LakeLocation.of(lake_uri, s3_options)
    table = DeltaTable(location.table_uri("messages"), storage_options=s3_options)
    assert table.transaction_version(BROKER) == result.committed[-1].range_end
    rows: list[int] = []
    for uri in table.file_uris():
        with location.fs.open(uri, "rb") as f:
            rows += pq.read_table(f, columns=["commitlog_offset"]).column(0).to_pylist()
    assert sorted(rows) == offsets
    assert location.fs.exists("lake-bucket/lake/messages/_delta_log/00000000000000000000.json")

    again = compact(spark, store_dir=store_dir, lake_uri=lake_uri, broker_name=BROKER, seal_idle_ms=0,
                    storage_options=s3_options)
    assert again.rows == 0 and DeltaTable(location.table_uri("messages"), storage_options=s3_options).version() == table.version()

    manifest, counts = verify_manifest(location, store_dir, Manifest.open(location, BROKER))
    assert len(counts) == len(result.committed) and manifest.verified_end == result.committed[-1].range_end
    got = run_sql(spark, lake_uri, "SELECT count(*) c FROM messages", storage_options=s3_options).collect()
    assert got[0]["c"] == len(offsets)

    # The key index on S3: written by the compaction, then filled again by Spark through s3a
    # as for a lake tiered before it; each time a look-up by key goes through it.
    assert index_complete(location)
    (found,) = find_messages(spark, lake_uri, topic="TopicA", key="order-42", storage_options=s3_options)
    assert found.uniq_key == "UNIQ00000042" and found.body.startswith(b"m42:")
    location.fs.rm("lake-bucket/lake/message_keys", recursive=True)
    assert not index_complete(location) and ensure_key_index(spark, location) and index_complete(location)
    by_key = find_messages(spark, lake_uri, topic="TopicA", key="k7", storage_options=s3_options)
    assert [m.uniq_key for m in by_key] == [f"UNIQ{i:08d}" for i in range(7, 500, 10)]


def test_spark_writes_and_reads_the_s3_lake_through_s3a(spark: Any, s3_options: dict[str, str]) -> None:
    """Spark's own S3 connector on the same bucket: Delta's MERGE writes the sweep's table, and
    delta-rs reads what Spark wrote."""
    from deltalake import DeltaTable

    lake = LakeLocation.of("s3://lake-bucket/spark-lake", s3_options)
    first = _write(spark, lake, transaction_rows("PENDING", 12, 1_700_000_000_000))
    second = _write(spark, lake, transaction_rows("ROLLBACK", 4, 1_700_000_100_000))
    assert second == first + 1
    assert spark_uri(lake, "transactions") == "s3a://lake-bucket/spark-lake/transactions"
    states = read_table(spark, lake, "transactions").groupBy("state").count().collect()
    assert {r["state"]: r["count"] for r in states} == {"ROLLBACK": 4, "PENDING": 8}
    table = DeltaTable(lake.table_uri("transactions"), storage_options=s3_options)
    assert table.version() == second
    rows: list[str] = []
    for uri in table.file_uris():
        with lake.fs.open(uri, "rb") as f:
            rows += pq.read_table(f, columns=["state"]).column(0).to_pylist()
    assert sorted(rows) == ["PENDING"] * 8 + ["ROLLBACK"] * 4
