"""ColdReader over a lake that grows while the reader caches blocks: a block read when the lake
held only part of it must not hide the offsets tiered after (a miss there would move a
consumer past messages the lake holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lake_helpers import WriteStore, make_message

from lakemq.jobs.compact import compact
from lakemq.tiering.cold_read import ColdReader, may_hold
from lakemq.tiering.lake_fs import LakeLocation

pytestmark = pytest.mark.spark

BROKER = "broker-a"
COUNT = 120


def test_a_block_cached_before_the_lake_grew_is_read_again(
    spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    write_store([make_message("TopicG", b"g%d" % i + bytes(200)) for i in range(COUNT)], file_size=8192)
    # The writer's file is not idle yet: the lake gets the sealed files only.
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=3_600_000)
    reader = ColdReader(LakeLocation.of(str(lake)), block_size=256)
    first = reader.read("TopicG", 0, 0, COUNT, COUNT)
    held = len(first)
    assert 0 < held < COUNT and [r.queue_offset for r in first] == list(range(held))
    assert reader.stats.lake_reads == 1

    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name=BROKER, seal_idle_ms=0)
    rest = reader.read("TopicG", 0, held, COUNT, COUNT)
    assert [r.queue_offset for r in rest] == list(range(held, COUNT))
    assert reader.stats.lake_reads == 2  # the partial block was read again, once
    again = reader.read("TopicG", 0, 0, COUNT, COUNT)
    assert len(again) == COUNT and reader.stats.lake_reads == 2  # now whole enough: from the cache


def test_a_block_read_skips_files_whose_statistics_exclude_it() -> None:
    """A file is read for a block only if its queue_id and queue_offset ranges (Delta
    statistics) meet the block's; one without statistics is read."""
    add = {"min.queue_id": 0, "max.queue_id": 3, "min.queue_offset": 100, "max.queue_offset": 199}
    assert may_hold(add, 2, 0, 256) and may_hold(add, 0, 199, 200) and may_hold(add, 3, 100, 101)
    assert not may_hold(add, 2, 200, 456)  # the block starts past the file's last offset
    assert not may_hold(add, 2, 0, 100)  # and ends before its first
    assert not may_hold(add, 4, 0, 256)  # a queue the file does not hold
    assert may_hold({"min.queue_id": None, "max.queue_id": None}, 9, 0, 1)
