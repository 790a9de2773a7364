"""Sealing what the broker has flushed: ranges end on the last whole record below the flushed
offset the checkpoint publishes, inside a file that is neither full nor idle, and the next
seal continues there; the ranges' rows, digests and queue ends add up to the file's."""

from __future__ import annotations

import sys
from pathlib import Path

from lakemq.store.checkpoint import StoreCheckpoint, read_flushed_offset
from lakemq.tiering.seal import seal_segments

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lake_helpers import FILE_SIZE, store_writer, user_messages


def _publish(store: Path, offset: int) -> None:
    checkpoint = StoreCheckpoint(store / "checkpoint")
    checkpoint.publish_flushed(offset)
    checkpoint.shutdown()


def test_checkpoint_publishes_the_flushed_offset(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    assert read_flushed_offset(path) == 0  # no file
    checkpoint = StoreCheckpoint(path)
    assert read_flushed_offset(path) == 0  # never published
    checkpoint.publish_flushed(123_456_789_012)
    assert read_flushed_offset(path) == 123_456_789_012  # seen before the checkpoint's own flush
    checkpoint.physic_msg_timestamp = 5
    checkpoint.shutdown()  # the checkpoint's flush keeps the published value
    assert read_flushed_offset(path) == 123_456_789_012
    with open(path, "r+b") as f:  # half written: the value and its check disagree
        f.seek(44)
        f.write(b"\x01")
    assert read_flushed_offset(path) == 0


def test_seal_stops_at_the_flushed_offset_and_continues_there(tmp_path: Path) -> None:
    store = tmp_path / "store"
    offsets = store_writer(store)(user_messages(30))
    assert all(o < FILE_SIZE for o in offsets)  # one file, far from full
    # Without a published offset: nothing (the file is not idle), with flushed or not.
    assert seal_segments(store, idle_ms=600_000, flushed=True) == []

    _publish(store, offsets[10] + 7)  # inside record 10: it is not whole below the offset
    first = seal_segments(store, idle_ms=600_000, flushed=True)
    assert [(s.range_start, s.range_end, s.rows, s.full) for s in first] == [(0, offsets[10], 10, False)]
    assert seal_segments(store, idle_ms=600_000) == []  # without flushed: still waits for idle

    end = offsets[29] + (offsets[29] - offsets[28])  # the records are all one size
    _publish(store, end)
    second = seal_segments(store, idle_ms=600_000, flushed=True)
    assert [(s.range_start, s.range_end, s.rows) for s in second] == [(offsets[10], end, 20)]
    assert seal_segments(store, idle_ms=600_000, flushed=True) == []  # nothing new flushed

    # The two ranges hold what one seal of the whole run holds: the queue ends of the later
    # range are the file's (4 queues, round robin).
    assert second[0].queue_ends == {"TopicA": {"0": 8, "1": 8, "2": 7, "3": 7}}


def test_the_seal_step_takes_the_flushed_setting(tmp_path: Path) -> None:
    """The tiering DAG's ``flushed`` param reaches the seal step (lakemq.jobs.tier_steps)."""
    from lakemq.jobs.tier_steps import run_step

    store = tmp_path / "store"
    offsets = store_writer(store)(user_messages(5))
    _publish(store, offsets[3])
    values = {"store_dir": str(store), "lake_uri": str(tmp_path / "lake"), "conf": {"tierSealIdleMs": "600000"}}
    assert run_step("seal", values)["sealed"] == 0  # a young file, not full: waits
    summary = run_step("seal", {**values, "flushed": "true"})
    assert (summary["sealed"], summary["rows"], summary["ranges"]) == (1, 3, [[0, offsets[3]]])
