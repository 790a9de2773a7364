"""Abnormal shutdown: a real process writes through the facade and dies without shutting down;
the files are then damaged the way a crash damages them; the reload must serve every intact
message through get_message and query_message, and nothing else."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from lakemq.common.record import BODY_POS, decode_record
from lakemq.store.config import FlushDiskType
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_msg, small_config, wait_dispatched

REPO = Path(__file__).resolve().parents[2]
COUNT = 95
# Messages before SPLIT are older than the checkpoint when the process dies, so the CommitLog
# replay starts after some of them while the one IndexFile (400 entries) began before: the
# torn IndexFile must still be rebuilt whole.
SPLIT = 70

CHILD = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from lakemq.store.config import FlushDiskType
    from lakemq.store.message_store import MessageStore
    from lakemq.store.put_request import MessagesPut
    from tests.store.store_helpers import make_msg, small_config, wait_dispatched

    root = Path(sys.argv[1])
    store = MessageStore(small_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_index_num=400))
    assert store.load()
    store.start()
    out = []
    for i in range({count}):
        if i == {split}:
            time.sleep(3.5)  # the checkpoint moves past the first messages (and its 3 s margin)
        r = store.put(MessagesPut.of(make_msg("TopicR", b"payload-%04d" % i, queue_id=i % 3, keys=f"key{{i}}",
                                       uniq=f"U{{i:04d}}")))
        assert r.is_ok, r
        out.append([r.append_result.wrote_offset, r.append_result.wrote_bytes, i % 3,
                    r.append_result.logics_offset])
    wait_dispatched(store)
    print(json.dumps(out), flush=True)
    os._exit(0)  # no shutdown: the abort file stays, nothing is flushed on the way out
""").format(count=COUNT, split=SPLIT)


def run_child(root: Path) -> list[list[int]]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def commit_log_file(root: Path, offset: int, file_size: int) -> Path:
    return root / "commitlog" / f"{offset - offset % file_size:020d}"


def test_abnormal_shutdown_recovery(tmp_path: Path) -> None:
    root = tmp_path / "store"
    written = run_child(root)
    assert (root / "abort").exists()
    config = small_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_index_num=400)
    file_size = config.mapped_file_size_commit_log

    # 1. The last record is torn (its body CRC no longer matches) and garbage follows it.
    last_offset, last_size, last_queue, last_logic = written[-1]
    path = commit_log_file(root, last_offset, file_size)
    data = bytearray(path.read_bytes())
    pos = last_offset % file_size
    data[pos + BODY_POS + 2] ^= 0xFF
    data[pos + last_size : pos + last_size + 12] = struct.pack(">iII", 5000, 0xDAA320A7, 7)
    path.write_bytes(bytes(data))
    intact = written[:-1]
    commit_log_end = last_offset  # where recovery must cut

    # 2. A ConsumeQueue has a dirty tail: entries pointing beyond the CommitLog's end.
    cq_dir = root / "consumequeue" / "TopicR" / "0"
    count0 = sum(1 for w in written if w[2] == 0)
    cq_file_size = config.mapped_file_size_consume_queue
    tail = count0 * 20
    cq_path = cq_dir / f"{tail - tail % cq_file_size:020d}"
    cq_data = bytearray(cq_path.read_bytes()) if cq_path.exists() else bytearray(cq_file_size)
    dirty = struct.pack(">qiq", commit_log_end + 4096, 120, 0) * 2
    cq_data[tail % cq_file_size : tail % cq_file_size + len(dirty)] = dirty
    cq_path.write_bytes(bytes(cq_data))

    store = MessageStore(config)
    assert store.load()
    assert not store.last_exit_ok
    store.start()
    try:
        assert store.get_max_phy_offset() == commit_log_end
        for queue_id in range(3):
            expected = [w for w in intact if w[2] == queue_id]
            assert store.get_max_offset_in_queue("TopicR", queue_id) == len(expected)
            bodies: list[bytes] = []
            offset = 0
            while True:
                got = store.get_message("g", "TopicR", queue_id, offset, 32)
                if got.status is not GetMessageStatus.FOUND:
                    assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
                    break
                bodies.extend(decode_record(b, check_crc=True).body for b in got.buffers)
                offset = got.next_begin_offset
            assert bodies == [b"payload-%04d" % written.index(w) for w in expected]
        for i, (wrote_offset, _size, _q, _logic) in enumerate(intact):
            hits = store.query_message("TopicR", f"key{i}", 8, 0, 2**62).messages
            assert [decode_record(h).commit_log_offset for h in hits] == [wrote_offset], i
            assert len(store.query_message("TopicR", f"U{i:04d}", 8, 0, 2**62).messages) == 1
        assert store.query_message("TopicR", f"key{COUNT - 1}", 8, 0, 2**62).messages == []
        assert store.look_message_by_offset(last_offset) is None

        # the store carries on: the cut message's queue offset is handed out again
        r = store.put(MessagesPut.of(make_msg("TopicR", b"after", queue_id=last_queue, keys="after")))
        assert r.append_result is not None and r.append_result.logics_offset == last_logic
        wait_dispatched(store)
        got = store.get_message("g", "TopicR", last_queue, last_logic, 4)
        assert [decode_record(b).body for b in got.buffers] == [b"after"]
        assert len(store.query_message("TopicR", "after", 8, 0, 2**62).messages) == 1
    finally:
        store.shutdown()
    assert not (root / "abort").exists()


def test_normal_shutdown_then_torn_tail(tmp_path: Path) -> None:
    """Even after a clean shutdown, a record damaged on disk is cut and its index entries go."""
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    assert store.load()
    store.start()
    results = [store.put(MessagesPut.of(make_msg("TopicN", b"n%d" % i, keys=f"k{i}"))) for i in range(20)]
    wait_dispatched(store)
    store.shutdown()
    last = results[-1].append_result
    assert last is not None
    path = commit_log_file(root, last.wrote_offset, 4096)
    data = bytearray(path.read_bytes())
    data[last.wrote_offset % 4096 + BODY_POS] ^= 0xFF
    path.write_bytes(bytes(data))
    store = MessageStore(small_config(root))
    assert store.load()
    assert store.last_exit_ok
    store.start()
    try:
        assert store.get_max_offset_in_queue("TopicN", 0) == 19
        assert store.query_message("TopicN", "k19", 4, 0, 2**62).messages == []
        assert len(store.query_message("TopicN", "k18", 4, 0, 2**62).messages) == 1
        r = store.put(MessagesPut.of(make_msg("TopicN", b"new", keys="k19")))
        assert r.append_result is not None and r.append_result.logics_offset == 19
        wait_dispatched(store)
        hits = store.query_message("TopicN", "k19", 4, 0, 2**62).messages
        assert [decode_record(h).body for h in hits] == [b"new"]
    finally:
        store.shutdown()
