"""The lake's IndexFile, ``message_keys``: written by every compaction, filled once for a lake
tiered before it existed, and what look-ups by key read."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from lake_helpers import FILE_SIZE, WriteStore, make_message, user_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.key_files import key_rows
from lakemq.jobs.key_index import ensure_key_index, index_complete
from lakemq.jobs.message_lookup import _files_by_statistics, find_messages
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.table_files import table_dataset
from lakemq.tiering.tables import DATA_SCHEMA, KEYS_DATA_SCHEMA, KEYS_SCHEMA


def test_key_rows_are_one_per_key_and_unique_key() -> None:
    batch = pa.record_batch({
        "keys": ["a b", None, "", "c  d"], "uniq_key": ["U0", None, "U2", None],
        "store_host": ["h:1"] * 4, "commitlog_offset": pa.array([10, 20, 30, 40], pa.int64()),
        "store_timestamp": pa.array([1, 2, 3, 4], pa.int64()),
    })
    rows = [(r["key"], r["key_type"], r["commitlog_offset"]) for r in key_rows(batch).to_pylist()]
    assert rows == [("a", "key", 10), ("b", "key", 10), ("c", "key", 40), ("d", "key", 40),
                    ("U0", "uniq", 10), ("U2", "uniq", 30)]


def _rows(lake: Path, table: str, schema: pa.Schema, columns: list[str]) -> list[dict[str, Any]]:
    data = table_dataset(LakeLocation.of(str(lake)), table, schema, lambda add: True)
    assert data is not None
    actions = pa.table(DeltaTable(str(lake / table)).get_add_actions(flatten=True)).to_pylist()
    topics = {a["path"].split("/")[-1]: a["partition.topic"] for a in actions}
    return [{**row, "topic": topics[Path(fragment.path).name]} for fragment in data.get_fragments()
            for row in fragment.to_table(columns=columns).to_pylist()]


def _index(lake: Path) -> list[tuple[str, str, str, int]]:
    rows = _rows(lake, "message_keys", KEYS_DATA_SCHEMA, ["key", "key_type", "commitlog_offset"])
    return [(r["topic"], r["key"], r["key_type"], r["commitlog_offset"]) for r in rows]


def _expected(lake: Path) -> list[tuple[str, str, str, int]]:
    """What the index must hold: every key and unique key of every ``messages`` row."""
    rows = _rows(lake, "messages", DATA_SCHEMA, ["keys", "uniq_key", "commitlog_offset"])
    return [(r["topic"], k, "key", r["commitlog_offset"]) for r in rows for k in r["keys"].split()] + [
        (r["topic"], r["uniq_key"], "uniq", r["commitlog_offset"]) for r in rows]


def test_compaction_indexes_every_key_once_in_sorted_files(spark: Any, store_dir: Path, write_store: WriteStore,
                                                           tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_store(user_messages(300) + user_messages(50, topic="TopicB"))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    assert index_complete(LakeLocation.of(str(lake)))
    assert sorted(_index(lake)) == sorted(_expected(lake)) and len(_index(lake)) == 3 * 350
    table = DeltaTable(str(lake / "message_keys"))
    for uri in table.file_uris():
        keys = pq.read_table(uri, columns=["key"]).column(0).to_pylist()
        assert keys == sorted(keys), uri
        column = pq.ParquetFile(uri).metadata.row_group(0).column(0)
        assert column.path_in_schema == "key" and column.is_stats_set and column.has_column_index
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert all(a["min.key"] is not None and a["max.commitlog_offset"] is not None for a in adds)
    version = table.version()
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    assert DeltaTable(str(lake / "message_keys")).version() == version  # nothing new, nothing committed


def test_a_lake_tiered_before_the_index_is_searched_by_scan_then_filled_once(
        spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    write_store(user_messages(200))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    indexed = [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k3")]
    # As a lake tiered before the index existed, and then a fill that died before its commit.
    shutil.rmtree(lake / "message_keys")
    DeltaTable.create(str(lake / "message_keys"), Schema.from_arrow(KEYS_SCHEMA), partition_by=["topic"])
    assert not index_complete(location)
    scanned = [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k3")]
    assert scanned == indexed == [f"UNIQ{i:08d}" for i in range(3, 200, 10)]

    assert ensure_key_index(spark, location)
    assert index_complete(location) and sorted(_index(lake)) == sorted(_expected(lake))
    version = DeltaTable(str(lake / "message_keys")).version()
    assert not ensure_key_index(spark, location)
    assert DeltaTable(str(lake / "message_keys")).version() == version
    assert [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k3")] == indexed
    (one,) = find_messages(spark, str(lake), topic="TopicA", unique_key="UNIQ00000042")
    assert one.keys == ("order-42", "k2")


def test_unique_keys_of_many_producers_are_found_through_the_index(spark: Any, store_dir: Path,
                                                                    write_store: WriteStore, tmp_path: Path) -> None:
    # Two producers' unique keys interleave, so every file's [min, max] of uniq_key holds any
    # key: Delta's statistics prune nothing and the look-up goes through message_keys.
    lake = tmp_path / "lake"
    write_store([make_message("TopicA", f"m{i}".encode() + bytes(300), queue_id=i % 4, keys=f"order-{i}",
                              uniq=f"{'AZ'[i % 2]}{i:08d}") for i in range(1500)])
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0, boundary_stride=FILE_SIZE)
    assert _files_by_statistics(LakeLocation.of(str(lake)), "TopicA", "A00001498") > 2
    (found,) = find_messages(spark, str(lake), topic="TopicA", unique_key="A00001498")
    assert found.keys == ("order-1498",) and found.body.startswith(b"m1498")
    assert find_messages(spark, str(lake), topic="TopicA", unique_key="Z00001498") == []
