"""compact: segments into Delta exactly once, read back with deltalake, pyarrow and Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from lake_helpers import WriteStore, mixed_messages, user_messages

from lakemq.common.record import BODY_POS, decode_record
from lakemq.errors import CorruptSegmentError, VerificationError
from lakemq.jobs.compact import compact, ensure_table, write_segment_files
from lakemq.jobs.maintain import checkpoint, optimize, vacuum
from lakemq.jobs.sources import register_sources
from lakemq.jobs.sql import run_sql
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest, manifest_path
from lakemq.tiering.retention import RetentionRules, apply_retention, verified_files
from lakemq.tiering.seal import commitlog_files, load_seals, seal_dir, seal_segments
from lakemq.tiering.verify import count_lake_range, verify_manifest

BROKER = "broker-a"


def lake_rows(table_uri: str) -> list[dict[str, Any]]:
    """Every row of the current snapshot, read file by file with pyarrow."""
    rows = []
    for uri in DeltaTable(table_uri).file_uris():
        rows += pq.read_table(uri).to_pylist()
    return rows


def run(spark: Any, store_dir: Path, lake: Path, **kw: Any) -> Any:
    return compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=0, **kw)


def test_compact_reads_back_everywhere_and_rerun_changes_nothing(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = write_store(mixed_messages(600))
    lake = tmp_path / "lake"
    saved: list[int] = []  # entries in each manifest saved
    save = Manifest.save
    monkeypatch.setattr(Manifest, "save", lambda self, at: saved.append(len(self.entries)) or save(self, at))
    result = run(spark, store_dir, lake)
    # One save for the run's commits, however many (each save writes the whole document).
    assert len(result.committed) > 1 and saved == [len(result.committed)]
    monkeypatch.undo()
    seals = load_seals(store_dir)
    assert result.rows == len(offsets) == sum(s.rows for s in seals)
    assert [e.range_start for e in result.committed] == [s.range_start for s in seals]
    table_uri = str(lake / "messages")
    table = DeltaTable(table_uri)
    assert table.transaction_version(BROKER) == seals[-1].range_end
    assert table.metadata().partition_columns == ["topic", "store_date"]
    names = [f.name for f in table.schema().fields]
    assert names[:5] == ["topic", "kind", "queue_id", "queue_offset", "commitlog_offset"] and "store_date" in names
    rows = lake_rows(table_uri)
    assert sorted(r["commitlog_offset"] for r in rows) == offsets
    first = decode_record(commitlog_files(store_dir)[0].path.read_bytes(), 0)
    assert next(r for r in rows if r["commitlog_offset"] == 0)["body"] == first.body
    # Spark SQL through Delta: system records never show up as user messages.
    counts = {r["kind"]: r["n"] for r in run_sql(spark, str(lake), "SELECT kind, count(*) n FROM messages GROUP BY kind").collect()}
    assert counts == {"normal": 600, "schedule": 1, "trans_half": 1, "trans_op": 1}
    assert run_sql(spark, str(lake), "SELECT count(*) c FROM user_messages").collect()[0]["c"] == 600
    delayed = run_sql(spark, str(lake), "SELECT properties['REAL_TOPIC'] t FROM schedule_messages").collect()
    assert [r["t"] for r in delayed] == ["TopicA"]
    # The same run again: nothing pending, no new Delta version, the manifest unchanged.
    version = table.version()
    again = run(spark, store_dir, lake)
    assert again.committed == () and again.rows == 0
    assert DeltaTable(table_uri).version() == version
    assert len(lake_rows(table_uri)) == len(offsets)


def test_delta_log_follows_the_protocol(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> None:
    write_store(user_messages(300, topic="Topic%R|x"))
    lake = tmp_path / "lake"
    run(spark, store_dir, lake)
    log_dir = lake / "messages" / "_delta_log"
    actions = [json.loads(line) for line in (log_dir / f"{0:020d}.json").read_text().splitlines()]
    protocol = next(a["protocol"] for a in actions if "protocol" in a)
    assert protocol["minReaderVersion"] >= 1 and protocol["minWriterVersion"] >= 2
    meta = next(a["metaData"] for a in actions if "metaData" in a)
    assert meta["partitionColumns"] == ["topic", "store_date"] and meta["format"]["provider"] == "parquet"
    assert {f["name"] for f in json.loads(meta["schemaString"])["fields"]} >= {"body", "properties", "store_date"}
    seals = load_seals(store_dir)
    for version, seal in enumerate(seals, start=1):
        commit = [json.loads(line) for line in (log_dir / f"{version:020d}.json").read_text().splitlines()]
        info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
        assert (info["lakemq.broker"], info["lakemq.rangeStart"], info["lakemq.rangeEnd"], info["lakemq.rows"]) == (
            BROKER, seal.range_start, seal.range_end, seal.rows)
        assert int(info["lakemq.digest"]) == seal.digest
        txn = next(a["txn"] for a in commit if "txn" in a)
        assert (txn["appId"], txn["version"]) == (BROKER, seal.range_end)
        adds = [a["add"] for a in commit if "add" in a]
        assert adds and all(a["partitionValues"]["topic"] == "Topic%R|x" for a in adds)
        for add in adds:
            stats = json.loads(add["stats"])
            assert stats["numRecords"] > 0
            assert seal.range_start <= stats["minValues"]["commitlog_offset"] <= stats["maxValues"]["commitlog_offset"]
            assert stats["maxValues"]["commitlog_offset"] < seal.range_end
            # Hive-escaped directory (topic=Topic%25R%7Cx), URI-encoded once in the log.
            assert add["path"].startswith("topic=Topic%2525R%257Cx/store_date=")
        assert sum(json.loads(a["stats"])["numRecords"] for a in adds) == seal.rows
    assert all(os.path.exists(u) for u in DeltaTable(str(lake / "messages")).file_uris())


def test_crash_after_write_before_commit_leaves_one_copy(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    offsets = write_store(user_messages(400))
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    ensure_table(location)
    seals = seal_segments(store_dir, idle_ms=0)
    # A run that wrote its files and died before committing anything.
    dead = write_segment_files(spark, store_dir=store_dir, lake=location, segments=seals, run_id="deadrun")
    orphans = [f["path"] for files in dead.values() for f in files if f["table"] == "messages"]
    key_orphans = [f["path"] for files in dead.values() for f in files if f["table"] == "message_keys"]
    assert orphans and key_orphans and DeltaTable(str(lake / "messages")).transaction_version(BROKER) is None
    run(spark, store_dir, lake)
    table_uri = str(lake / "messages")
    assert sorted(r["commitlog_offset"] for r in lake_rows(table_uri)) == offsets
    referenced = {os.path.relpath(u, table_uri) for u in DeltaTable(table_uri).file_uris()}
    assert not referenced & {p.replace("%", "%25") for p in orphans} and not referenced & set(orphans)
    gone = vacuum(location, retention_hours=0)
    assert len(gone) == len(orphans) and not any((lake / "messages" / p).exists() for p in orphans)
    assert sorted(vacuum(location, retention_hours=0, table="message_keys")) == sorted(key_orphans)
    assert not any((lake / "message_keys" / p).exists() for p in key_orphans)
    assert sorted(r["commitlog_offset"] for r in lake_rows(table_uri)) == offsets


def test_lost_or_stale_manifest_is_rebuilt_from_the_delta_log(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    write_store(user_messages(400))
    lake = tmp_path / "lake"
    run(spark, store_dir, lake)
    location = LakeLocation.of(str(lake))
    saved = Manifest.load(location, BROKER)
    assert saved is not None and len(saved.entries) == len(load_seals(store_dir))
    os.unlink(manifest_path(location, BROKER))
    rebuilt = Manifest.open(location, BROKER)
    assert rebuilt.entries == saved.entries
    # A crash after the last commit, before the manifest was saved: the manifest lags.
    Manifest(BROKER, saved.entries[:1]).save(location)
    assert Manifest.open(location, BROKER).entries == saved.entries
    again = run(spark, store_dir, lake)
    assert again.committed == ()


def test_retention_deletes_only_committed_and_verified_files(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    write_store(user_messages(500))
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    files = commitlog_files(store_dir)
    seal_segments(store_dir, idle_ms=60_000)  # the live file stays unsealed
    run_result = compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=60_000)
    assert len(run_result.committed) == len(files) - 1
    manifest = Manifest.open(location, BROKER)
    assert verified_files(store_dir, manifest) == []  # committed, not yet verified
    # A seal that disagrees with the lake fails verification and nothing is marked.
    seal_file = seal_dir(store_dir) / f"{files[0].start:020d}.json"
    original = seal_file.read_text()
    seal_file.write_text(original.replace('"rows": ', '"rows": 1', 1))
    with pytest.raises(VerificationError, match="holds"):
        verify_manifest(location, store_dir, manifest)
    seal_file.write_text(original)
    verified, counts = verify_manifest(location, store_dir, manifest)
    assert all(e.verified for e in verified.entries) and len(counts) == len(files) - 1
    first = verified.entries[0]
    assert count_lake_range(location, first.range_start, first.range_end).rows == first.rows
    outcome = apply_retention(store_dir, verified, RetentionRules(0, broker_reads_lake=True))
    assert outcome.deleted == tuple(f.path.name for f in files[:-1])
    assert [f.path for f in commitlog_files(store_dir)] == [files[-1].path]
    assert verified.verified_end == files[-1].start


def test_corrupt_record_is_reported_with_its_offset_unless_skipped(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    offsets = write_store(user_messages(300))
    second_file = commitlog_files(store_dir)[1]
    data = bytearray(second_file.path.read_bytes())
    victim = offsets[offsets.index(second_file.start) + 5]
    data[victim - second_file.start + BODY_POS] ^= 0x55
    second_file.path.write_bytes(bytes(data))
    lake = tmp_path / "lake"
    with pytest.raises(CorruptSegmentError) as err:
        run(spark, store_dir, lake)
    assert err.value.offset == victim and str(victim) in str(err.value)
    assert DeltaTable(str(lake / "messages")).transaction_version(BROKER) is None
    # Reading the segment directly with Spark names the offset too.
    register_sources(spark)
    with pytest.raises(Exception, match=f"offset {victim}"):
        spark.read.format("commitlog").option("path", str(store_dir)).load().count()
    skipped = run(spark, store_dir, lake, skip_corrupt=True)
    assert skipped.rows == len(offsets) - 1 and skipped.skipped_corrupt[0][0] == victim
    got = sorted(r["commitlog_offset"] for r in lake_rows(str(lake / "messages")))
    assert got == [o for o in offsets if o != victim]


def test_optimize_and_checkpoint_keep_every_row(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = write_store(user_messages(400))
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    run(spark, store_dir, lake)
    table_uri = str(lake / "messages")
    before = len(DeltaTable(table_uri).file_uris())
    added, removed = optimize(location, target_size=64 << 20)
    assert removed == before and added < before
    version = checkpoint(location)
    assert (lake / "messages" / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    assert sorted(r["commitlog_offset"] for r in lake_rows(table_uri)) == offsets
    # Verification finds the rows through the rewritten files' statistics, reading each
    # compacted file once although it spans several ranges.
    reads: list[object] = []
    read_table = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda source, **kw: reads.append(source) or read_table(source, **kw))
    manifest, _ = verify_manifest(location, store_dir, Manifest.open(location, BROKER))
    assert all(e.verified for e in manifest.entries)
    assert len(reads) == len(DeltaTable(table_uri).file_uris()) < len(manifest.entries)
    assert Manifest.open(location, BROKER).entries == Manifest.open(location, BROKER).entries


def test_a_slaves_copy_continues_where_the_masters_tiering_stopped(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    """The master tiered part of its last file (an idle seal), then was lost; its slave holds
    the same CommitLog bytes but no seals. Tiering the slave's store commits only what the lake
    lacks: every record once (docs/REPLICATION.md)."""
    import shutil

    first = write_store(user_messages(400))  # a 64 KiB file and part of the next
    lake = tmp_path / "lake"
    run(spark, store_dir, lake)
    master_end = Manifest.open(LakeLocation.of(str(lake)), BROKER).committed_end
    assert master_end > first[-1] and master_end % (64 * 1024)  # a partial file was sealed
    more = write_store(user_messages(300))
    slave = tmp_path / "slave"
    shutil.copytree(store_dir / "commitlog", slave / "commitlog")  # what replication gave the slave
    result = run(spark, slave, lake)
    assert result.committed and result.committed[0].range_start == master_end
    assert load_seals(slave)[0].range_start == master_end  # nothing sealed below the lake
    offsets = sorted(r["commitlog_offset"] for r in lake_rows(str(lake / "messages")))
    assert offsets == first + more  # each once
