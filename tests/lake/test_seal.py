"""Sealing: which CommitLog ranges are final, their boundary index, digest and damage."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from lake_helpers import FILE_SIZE, WriteStore, user_messages

from lakemq.common.record import BODY_POS, check_record, decode_record
from lakemq.tiering.digest import body_crc32c, digest_of
from lakemq.tiering.seal import commitlog_files, load_seals, seal_segments


def _records(path: Path, start: int, end: int) -> list[tuple[int, bytes]]:
    data = path.read_bytes()
    base = int(path.name)
    pos, out = start - base, []
    while pos < end - base:
        m = decode_record(data, pos)
        out.append((base + pos, m.body))
        pos += m.store_size
    return out


def test_full_files_seal_and_the_live_file_waits_until_idle(store_dir: Path, write_store: WriteStore) -> None:
    write_store(user_messages(900))
    files = commitlog_files(store_dir)
    assert len(files) >= 3
    now = int(time.time() * 1000)
    seals = seal_segments(store_dir, idle_ms=60_000, stride=8 << 10, now_ms=now)
    assert [s.file_start for s in seals] == [f.start for f in files[:-1]]  # the live file is not idle yet
    for seal, f in zip(seals, files):
        assert seal.full and seal.range_start == f.start and seal.range_end == f.end
        records = _records(f.path, seal.range_start, seal.data_end)
        assert seal.rows == len(records) and seal.corrupt == ()
        assert seal.digest == digest_of([o for o, _ in records], body_crc32c(b for _, b in records))
        data = f.path.read_bytes()
        # Every boundary starts a record, and the ranges tile the records.
        for b in seal.boundaries:
            assert check_record(data, b - f.start, check_crc=True, physical_offset=b) > 0
        ranges = seal.byte_ranges()
        assert ranges[0][0] == f.start and ranges[-1][1] == seal.data_end and len(ranges) > 1
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert seal_segments(store_dir, idle_ms=60_000, now_ms=now) == []  # nothing new
    live = files[-1]
    partial = seal_segments(store_dir, idle_ms=60_000, now_ms=now + 61_000)
    assert len(partial) == 1 and not partial[0].full and partial[0].range_start == live.start
    assert partial[0].rows == len(_records(live.path, live.start, partial[0].range_end))
    # More writes to the live file: the next seal starts where the partial one ended.
    write_store(user_messages(400))
    later = seal_segments(store_dir, idle_ms=0)
    assert later[0].range_start == partial[0].range_end
    ends = [s.range_end for s in load_seals(store_dir)]
    starts = [s.range_start for s in load_seals(store_dir)]
    assert starts[1:] == ends[:-1]  # sealed ranges follow each other without gaps


def test_damage_is_recorded_with_its_offsets(store_dir: Path, write_store: WriteStore) -> None:
    write_store(user_messages(700))
    first = commitlog_files(store_dir)[0]
    data = bytearray(first.path.read_bytes())
    size = decode_record(data, 0).store_size
    victim = 3 * size
    data[victim + BODY_POS] ^= 0xFF
    first.path.write_bytes(bytes(data))
    os.utime(first.path, (time.time(), time.time()))
    seal = seal_segments(store_dir, idle_ms=60_000)[0]
    assert seal.corrupt == ((first.start + victim, first.start + victim + size),)
    assert seal.rows == len(_records(first.path, first.start, seal.data_end)) - 1
    assert seal.file_size == FILE_SIZE


def test_queue_ends_are_where_every_queue_ended(tmp_path: Path) -> None:
    """Merged over the seals, the queue ends equal the ConsumeQueues the store's own dispatch
    built: every topic and queue (delayed messages in SCHEDULE_TOPIC_XXXX, a transaction's
    records), with prepared and rolled-back records taking no offset."""
    from reindex_helpers import write_store as write_mixed_store

    from lakemq.store.consume_queue_store import ConsumeQueueStore
    from lakemq.tiering.seal import merge_queue_ends

    root = tmp_path / "store"
    write_mixed_store(root, count=300)
    seals = seal_segments(root, idle_ms=0)
    assert len(seals) >= 2 and all(s.queue_ends is not None for s in seals)
    merged: dict[str, dict[str, int]] = {}
    for seal in seals:
        merge_queue_ends(merged, seal.queue_ends or {})
    queues = ConsumeQueueStore(root / "consumequeue", 40 * 20, lambda _o, _s: -1)
    assert queues.load()
    queues.recover()
    built = {(cq.topic, cq.queue_id): cq.get_max_offset_in_queue() for cq in queues.all()}
    queues.shutdown()
    found = {(topic, int(q)): end for topic, ends in merged.items() for q, end in ends.items()}
    assert found == built and ("SCHEDULE_TOPIC_XXXX", 0) in found
    assert load_seals(root)[0].queue_ends == seals[0].queue_ends  # kept in the seal files
