"""kill -9 a SYNC_FLUSH writer at random moments; every acknowledged message must survive
recovery, decode with a good CRC, and the log must end exactly after the last good record.

A SIGKILL keeps the page cache, so what this exercises is a process dying mid-append (torn
record, half-built file); power loss is covered by the corrupted-tail tests."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from crash_writer import CONFIG, STORE_CONFIG, WRITERS, Acked, body_for, key_for, run_and_kill

from lakemq.common.record import decode_record
from lakemq.store.commit_log import CommitLog
from lakemq.store.commit_log_scan import iter_dispatch_requests
from lakemq.store.config import StoreConfig
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow


def _tear_tail(store: Path, acked: Acked) -> int | None:
    """Power-loss stand-in: right after the last acknowledged record, write a torn copy of
    that record's head (whatever unacknowledged bytes were there are lost). Returns where
    recovery must now end, or None when that spot is not in the last file."""
    offset, size, *_ = max(acked)
    end = offset + size
    last = max((store / "commitlog").iterdir())
    start = int(last.name)
    file_size = int(CONFIG["mapped_file_size_commit_log"])  # type: ignore[call-overload]
    if offset < start or end + 150 > start + file_size:
        return None
    with open(last, "r+b") as f:
        f.seek(offset - start)
        head = f.read(min(size, 150))
        f.seek(end - start)
        f.write(head)
    return end


def _check_store(store: Path, acked: Acked, abnormal: bool,
                 expected_end: int | None = None) -> int:
    cl = CommitLog(StoreConfig(store_path_root_dir=str(store), **CONFIG))  # type: ignore[arg-type]
    cl.load()
    seen: list[int] = []
    if abnormal:
        end = cl.recover_abnormally(0, lambda req: seen.append(req.commit_log_offset))
    else:
        end = cl.recover_normally()
    assert end == cl.get_max_offset()
    if expected_end is not None:
        assert end == expected_end
    for offset, size, writer, seq, _ in acked:
        raw = cl.get_message(offset, size)
        assert raw is not None, f"acknowledged message at {offset} lost"
        msg = decode_record(raw, check_crc=True)
        assert msg.body == body_for(writer, seq)
        assert msg.commit_log_offset == offset
    # The log walks cleanly from its start to exactly ``end``; nothing follows.
    pos = cl.get_min_offset()
    while pos < end:
        data = cl.get_data(pos)
        assert data is not None
        walked = 0
        for req in iter_dispatch_requests(data, 0, pos, check_crc=True):
            if req.msg_size <= 0:
                assert req.msg_size == 0 or pos + walked == end, f"bad record at {pos + walked} before end {end}"
                break
            walked += req.msg_size
        pos = pos + walked if pos + walked >= end else cl.roll_next_file(pos)
    assert pos == end
    last = cl.mapped_file_queue.mapped_files[-1]
    tail = last.raw_view()[end - last.file_from_offset :]
    assert tail.tobytes().count(0) == len(tail), "bytes left after the recovered end"
    tail.release()
    if abnormal:
        assert seen and {o for o, *_ in acked} <= set(seen)
    cl.mapped_file_queue.shutdown()
    return end


@pytest.mark.timeout(90)
def test_kill_9_never_loses_acknowledged_messages(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("LAKEMQ_CRASH_SEED", "7")))
    store = tmp_path / "store"
    all_acked: Acked = []
    deadline = time.monotonic() + 30
    rounds = 0
    while rounds < 6 and time.monotonic() < deadline:
        acked = run_and_kill(store, rounds, rng)
        all_acked.extend(acked)
        expected_end = _tear_tail(store, all_acked) if rounds % 3 == 2 else None
        _check_store(store, all_acked, abnormal=rounds % 2 == 1, expected_end=expected_end)
        rounds += 1
    assert rounds >= 3
    assert len(all_acked) > 100
    assert len({(o, s) for o, s, *_ in all_acked}) == len(all_acked)
    assert len(list((store / "commitlog").iterdir())) > 1  # the writers rolled files


@pytest.mark.timeout(90)
def test_kill_9_store_keeps_consume_queue_and_index(tmp_path: Path) -> None:
    """The same through the MessageStore: after each kill the reload (abnormal: the abort file
    is left) must serve every acknowledged message by queue offset and by key."""
    rng = random.Random(int(os.environ.get("LAKEMQ_CRASH_SEED", "11")))
    root = tmp_path / "store"
    all_acked: Acked = []
    for round_id in range(3):
        all_acked.extend(run_and_kill(root, round_id, rng, mode="store"))
        assert (root / "abort").exists()
        store = MessageStore(StoreConfig(store_path_root_dir=str(root), **STORE_CONFIG))  # type: ignore[arg-type]
        assert store.load() and not store.last_exit_ok
        store.start()
        try:
            for offset, size, tag, seq, queue_offset in all_acked:
                got = store.get_message("g", "CrashTopic", tag % 100, queue_offset, 1)
                assert got.status is GetMessageStatus.FOUND, (
                    tag, seq, queue_offset, got.status, offset, store.commit_log.get_max_offset(),
                    store.commit_log.get_message(offset, size) is not None)
                msg = decode_record(got.buffers[0], check_crc=True)
                assert (msg.commit_log_offset, msg.store_size) == (offset, size)
                assert msg.body == body_for(tag, seq)
            for offset, _, tag, seq, _ in all_acked[-20:]:
                hits = store.query_message("CrashTopic", key_for(tag, seq), 4, 0, 2**62).messages
                assert [decode_record(h).commit_log_offset for h in hits] == [offset]
            # Queue offsets go on rising across crashes, never reused (unacknowledged puts
            # that made it to disk may sit in between).
            for writer in range(WRITERS):
                mine = sorted((tag, seq, q) for _, _, tag, seq, q in all_acked if tag % 100 == writer)
                offsets = [q for *_, q in mine]
                assert offsets == sorted(set(offsets)), f"queue {writer}: offsets reused or out of order"
        finally:
            store.shutdown()
        assert not (root / "abort").exists()
        (root / "abort").touch()  # the next writer's run must start abnormally as well
