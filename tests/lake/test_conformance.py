"""Cross-engine conformance of every table lakemq writes: delta-spark (Delta Lake's own engine)
and delta-rs read the same rows, filtered counts agree in every reader we name, the protocol
versions and table features are ones both engines support, and a table that delta-spark has
OPTIMIZEd (ZORDER), VACUUMed and checkpointed is still read by the broker's cold reads, the
console and `tier run`, which then appends after Spark's commits."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, QueryBuilder
from lake_helpers import (
    WriteStore,
    make_message,
    mixed_messages,
    store_writer,
    transaction_rows,
    user_messages,
)

from lakemq.client import Message
from lakemq.console.lake_view import search_lake
from lakemq.jobs.compact import compact
from lakemq.jobs.delay_sweep import DueMessage, _record
from lakemq.jobs.transaction_sweep import _write
from lakemq.tiering.cold_read import ColdReader
from lakemq.tiering.lake_fs import LakeLocation

BROKER = "broker-a"
ODD_TOPIC = "order|eu%1"  # escaped in directory names, URI-encoded in the log
LONG_KEY = "customer-" + "x" * 40  # longer than the 32 characters Delta keeps of a string bound

# The protocol lakemq's tables carry, before and after delta-spark's OPTIMIZE, VACUUM and
# checkpoint: reader 1, writer 2, no table features (docs/LAKE_LAYOUT.md). Both engines read and
# write it; a change here must be checked against both before the documented list changes.
READER_VERSIONS = {1}
WRITER_VERSIONS = {2}
FEATURES: set[str] = set()


def _messages() -> list[Any]:
    msgs = mixed_messages(240)
    msgs += [make_message(ODD_TOPIC, f"odd{i}".encode(), queue_id=i % 2, keys=f"{LONG_KEY} k{i}",
                          tags="T" * 40 if i % 3 == 0 else None, uniq=f"ODD{i:05d}") for i in range(120)]
    msgs += [make_message("TopicA", b"bare") for _ in range(30)]  # no tags, keys or unique key
    return msgs


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("conformance")
    store_dir, lake = root / "store", root / "lake"
    store_writer(store_dir)(_messages())
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=0)
    yield store_dir, lake


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    props = row.get("properties")
    if props is not None:
        row["properties"] = sorted(props.items() if isinstance(props, dict) else props)
    return row


def _rust_rows(uri: str, key: str) -> list[dict[str, Any]]:
    data = pa.table(QueryBuilder().register("t", DeltaTable(uri)).execute(f"SELECT * FROM t ORDER BY {key}"))
    return [_normal(r) for r in data.to_pylist()]


def _spark_rows(spark: Any, uri: str, key: str) -> list[dict[str, Any]]:
    return [_normal(r) for r in spark.read.format("delta").load(uri).orderBy(key).toArrow().to_pylist()]


def _same_rows(spark: Any, uri: str, key: str) -> int:
    rust, jvm = _rust_rows(uri, key), _spark_rows(spark, uri, key)
    assert [sorted(r) for r in rust[:1]] == [sorted(r) for r in jvm[:1]], "the engines see other columns"
    assert rust == jvm
    return len(rust)


def _protocol(uri: str) -> tuple[int, int, set[str]]:
    p = DeltaTable(uri).protocol()
    return p.min_reader_version, p.min_writer_version, set(p.reader_features or []) | set(p.writer_features or [])


def _check_protocol(uri: str) -> None:
    reader, writer, features = _protocol(uri)
    assert reader in READER_VERSIONS and writer in WRITER_VERSIONS and features <= FEATURES, (reader, writer, features)


def test_messages_read_the_same_in_both_engines(spark: Any, lake: tuple[Path, Path]) -> None:
    uri = str(lake[1] / "messages")
    assert _same_rows(spark, uri, "commitlog_offset") == len(_messages())
    _check_protocol(uri)


def test_the_key_index_reads_the_same_in_both_engines(spark: Any, lake: tuple[Path, Path]) -> None:
    uri = str(lake[1] / "message_keys")
    order = ("topic", "key", "key_type", "commitlog_offset")
    rust = sorted(_rust_rows(uri, "commitlog_offset"), key=lambda r: tuple(r[c] for c in order))
    jvm = sorted(_spark_rows(spark, uri, "commitlog_offset"), key=lambda r: tuple(r[c] for c in order))
    assert rust == jvm and len(rust) >= 2 * len(_messages())
    _check_protocol(uri)
    # A key longer than the 32 characters the statistics keep is still found through them.
    assert spark.read.format("delta").load(uri).where(f"key = '{LONG_KEY}'").count() == len(
        [r for r in rust if r["key"] == LONG_KEY]) > 0


FILTERS: list[tuple[str, str, Callable[[dict[str, Any]], bool], Any]] = [
    ("tags", "tags = 'tag1'", lambda r: r["tags"] == "tag1", pc.field("tags") == "tag1"),
    ("long tags", f"tags = '{'T' * 40}'", lambda r: r["tags"] == "T" * 40, pc.field("tags") == "T" * 40),
    ("no tags", "tags IS NULL", lambda r: r["tags"] is None, pc.field("tags").is_null()),
    ("kind", "kind = 'schedule'", lambda r: r["kind"] == "schedule", pc.field("kind") == "schedule"),
    ("keys", f"keys = '{LONG_KEY} k7'", lambda r: r["keys"] == f"{LONG_KEY} k7", pc.field("keys") == f"{LONG_KEY} k7"),
    ("unique key", "uniq_key = 'UNIQ00000042'", lambda r: r["uniq_key"] == "UNIQ00000042",
     pc.field("uniq_key") == "UNIQ00000042"),
    ("topic", f"topic = '{ODD_TOPIC}'", lambda r: r["topic"] == ODD_TOPIC, pc.field("topic") == ODD_TOPIC),
]


@pytest.mark.parametrize("name, sql, keep, expr", FILTERS, ids=[f[0] for f in FILTERS])
def test_filtered_counts_agree_in_every_reader(spark: Any, lake: tuple[Path, Path], name: str, sql: str,
                                               keep: Callable[[dict[str, Any]], bool], expr: Any) -> None:
    uri = str(lake[1] / "messages")
    truth = sum(map(keep, _rust_rows(uri, "commitlog_offset")))
    assert truth > 0, "each filter should match something"
    query = QueryBuilder().register("t", DeltaTable(uri)).execute(f"SELECT count(*) AS n FROM t WHERE {sql}")
    assert pa.table(query).column("n")[0].as_py() == truth
    assert DeltaTable(uri).to_pyarrow_dataset().count_rows(filter=expr) == truth
    assert spark.read.format("delta").load(uri).where(sql).count() == truth


def test_metadata_tables_read_the_same_in_both_engines(spark: Any, tmp_path: Path) -> None:
    lake = LakeLocation.of(str(tmp_path / "lake"))
    first = _write(spark, lake, transaction_rows("PENDING", 20, 1_700_000_000_000))
    second = _write(spark, lake, transaction_rows("COMMIT", 5, 1_700_000_100_000))  # MERGE: 5 updated
    assert second == first + 1
    uri = str(tmp_path / "lake" / "transactions")
    assert _same_rows(spark, uri, "half_queue_offset") == 20
    states = [r["state"] for r in _rust_rows(uri, "half_queue_offset")]
    assert states == ["COMMIT"] * 5 + ["PENDING"] * 15
    _check_protocol(uri)

    done = [(DueMessage(f"SRC{i:04d}", "timer", Message("TopicA", b"x", properties={"UNIQ_KEY": f"U{i}"}),
                        1_700_000_000_000 + i), i % 2 == 0) for i in range(10)]
    _record(lake, done[:6])
    _record(lake, done[6:])
    uri = str(tmp_path / "lake" / "delay_sweep")
    assert _same_rows(spark, uri, "source_msg_id") == 10
    _check_protocol(uri)


def _spark_maintenance(spark: Any, uri: str) -> None:
    spark.sql(f"OPTIMIZE delta.`{uri}` ZORDER BY (queue_offset)")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    jvm = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri).checkpoint()


def test_a_table_spark_maintained_serves_cold_reads_console_and_tier_run(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    offsets = write_store(user_messages(200) + user_messages(100, topic=ODD_TOPIC))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=0)
    uri = str(lake / "messages")
    files_before = len(DeltaTable(uri).file_uris())
    _spark_maintenance(spark, uri)
    table = DeltaTable(uri)
    assert len(table.file_uris()) < files_before, "OPTIMIZE should have merged files"
    assert any(p.name.endswith(".checkpoint.parquet") for p in (lake / "messages" / "_delta_log").iterdir())
    history = [h.get("operation") for h in table.history()]
    assert {"OPTIMIZE", "VACUUM END"} <= set(history)
    _check_protocol(uri)

    location = LakeLocation.of(str(lake))
    cold = ColdReader(location).read(ODD_TOPIC, 1, 0, 1000, 1000)
    assert [r.queue_offset for r in cold] == list(range(25))  # 100 messages over 4 queues
    assert all(r.record for r in cold) and cold[0].tags == "tag1"
    found = search_lake(location, topic=ODD_TOPIC, key="k3")
    assert len(found) == 10 and {m.topic for m in found} == {ODD_TOPIC}

    # tier run's compaction appends after Spark's commits, and both engines read the result.
    more = write_store(user_messages(50, topic="TopicC"))
    result = compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=0)
    assert result.rows >= len(more) and DeltaTable(uri).version() > table.version()
    assert _same_rows(spark, uri, "commitlog_offset") == len(offsets) + len(more)
    log = lake / "messages" / "_delta_log"
    last = json.loads((log / "_last_checkpoint").read_text())
    assert last["version"] <= DeltaTable(uri).version()
