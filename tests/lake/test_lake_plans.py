"""How compaction cuts its work into Spark tasks, and what lets a look-up read few files: the
Delta statistics compaction writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from lake_helpers import WriteStore, user_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.lake_writer import plan_tasks
from lakemq.jobs.message_lookup import find_messages
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import SealedSegment

MIB = 1 << 20


def _segment(start: int, size: int, stride: int = 8 * MIB) -> SealedSegment:
    return SealedSegment(f"{start:020d}", start, 64 * MIB, start, start + size, start + size, True, 1, 0,
                         tuple(range(start, start + size, stride)), (), 0)


def test_tasks_are_one_even_wave_in_commitlog_order() -> None:
    store = LakeLocation.of("/store")
    segments = [_segment(0, 64 * MIB), _segment(64 * MIB, 64 * MIB), _segment(128 * MIB, 40 * MIB)]
    tasks = plan_tasks(store, segments, parallelism=2)
    assert len(tasks) == 2
    pieces = [p for t in tasks for p in t.pieces]
    assert [(p.start, p.end) for p in pieces] == [r for s in segments for r in s.byte_ranges()]
    assert abs(tasks[0].size - tasks[1].size) <= 8 * MIB
    assert all(p.file_uri == f"/store/commitlog/{p.range_start:020d}" for p in pieces)
    # A task never exceeds the cap: more tasks than cores when the ranges are big.
    capped = plan_tasks(store, segments, parallelism=2, max_task_bytes=32 * MIB)
    assert len(capped) == 6 and max(t.size for t in capped) <= 32 * MIB
    assert plan_tasks(store, [], parallelism=2) == []


@pytest.fixture
def lake(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    write_store(user_messages(600, body_size=300))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    return lake


def test_uniq_key_statistics_leave_one_file_for_a_lookup(spark: Any, lake: Path) -> None:
    # Delta skips a file whose [min, max] of a filtered column excludes the value: a producer's
    # unique keys grow with time, so one file's range holds a given key.
    adds = pa.table(DeltaTable(str(lake / "messages")).get_add_actions(flatten=True)).to_pydict()
    files = len(adds["path"])
    assert files >= 4
    lows, highs = adds["min.uniq_key"], adds["max.uniq_key"]
    assert len([i for i in range(files) if lows[i] <= "UNIQ00000300" <= highs[i]]) == 1
    (found,) = find_messages(spark, str(lake), topic="TopicA", unique_key="UNIQ00000300")
    assert found.keys == ("order-300", "k0") and found.body.startswith(b"m300:")


def test_a_key_matches_whole_keys_only(spark: Any, lake: Path) -> None:
    first = find_messages(spark, str(lake), topic="TopicA", key="order-30")
    assert [m.uniq_key for m in first] == ["UNIQ00000030"]  # not order-300 .. order-309
    # The newest three, listed oldest first, as the IndexFile answers a key.
    assert [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k7", limit=3)] == [
        "UNIQ00000577", "UNIQ00000587", "UNIQ00000597"]
    assert find_messages(spark, str(lake), topic="TopicA", key="order-3 k3") == []
    assert find_messages(spark, str(lake), topic="TopicA", key="order") == []
