"""Power cuts under a SYNC_FLUSH MessageStore: the writers of tests/store/crash_writer.py put
from four threads on a lazyfs mount, are killed with SIGKILL at a random moment, and the power
is cut (everything no fsync covered is dropped; one cut in three also tears the last page
written, one keeps every create, rename and unlink while dropping the data no fsync covered). After each cut the store recovers on the remounted file system and must serve every
acknowledged message by queue offset and by key, intact, with queue offsets never reused.
Unlike tests/store/test_crash.py's kill -9, nothing survives in the page cache."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from lakemq.common.durable import create_file_durably
from lakemq.common.record import decode_record
from lakemq.store.config import StoreConfig
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from tests.powercut.mount import LazyMount, fuse_available
from tests.store.crash_writer import STORE_CONFIG, WRITERS, Acked, body_for, key_for, run_and_kill

_WHY = fuse_available()
# Kills a writer and cuts the power under it, round after round.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY is not None, reason=f"lazyfs needs FUSE: {_WHY}")]


def _check(root: Path, acked: Acked) -> None:
    store = MessageStore(StoreConfig(store_path_root_dir=str(root), **STORE_CONFIG))  # type: ignore[arg-type]
    assert store.load() and not store.last_exit_ok, "a power cut must recover abnormally"
    store.start()
    try:
        for offset, size, tag, seq, queue_offset in acked:
            got = store.get_message("g", "CrashTopic", tag % 100, queue_offset, 1)
            assert got.status is GetMessageStatus.FOUND, (
                f"acknowledged put lost: writer {tag} seq {seq} queue offset {queue_offset} at {offset}: "
                f"{got.status}, CommitLog ends at {store.commit_log.get_max_offset()}")
            msg = decode_record(got.buffers[0], check_crc=True)
            assert (msg.commit_log_offset, msg.store_size) == (offset, size)
            assert msg.body == body_for(tag, seq)
        for offset, _, tag, seq, _ in acked[-20:]:
            hits = store.query_message("CrashTopic", key_for(tag, seq), 4, 0, 2**62).messages
            assert [decode_record(h).commit_log_offset for h in hits] == [offset]
        for writer in range(WRITERS):
            offsets = sorted(q for _, _, tag, _, q in acked if tag % 100 == writer)
            assert len(offsets) == len(set(offsets)), f"queue {writer}: a queue offset reused"
    finally:
        store.shutdown()


@pytest.mark.timeout(240)
def test_power_cuts_never_lose_acknowledged_puts(lazy: LazyMount) -> None:
    rng = random.Random(int(os.environ.get("LAKEMQ_POWERCUT_SEED", "3")))
    root = lazy.mountpoint / "store"
    rounds = int(os.environ.get("LAKEMQ_POWERCUT_STORE_ROUNDS", "6"))
    acked: Acked = []
    dropped = 0
    for round_id in range(rounds):
        t0 = time.monotonic()
        acked.extend(run_and_kill(root, round_id, rng, "store", run_for=(0.1, 1.0)))
        t1 = time.monotonic()
        counts = lazy.power_cut(tear=round_id % 3 == 1, keep_names=round_id % 3 == 2)
        dropped += counts["pending_files"]
        t2 = time.monotonic()
        lazy.mount()
        t3 = time.monotonic()
        _check(root, acked)
        print(f"round {round_id}: {len(acked)} acked; run {t1 - t0:.1f}s, cut {t2 - t1:.1f}s, mount {t3 - t2:.1f}s, "
              f"check {time.monotonic() - t3:.1f}s; {counts}")
        # The check shut the store down cleanly: the next run must start as after a crash.
        (root / "abort").touch()
        create_file_durably(root / "abort")
    assert len(acked) > 100
    assert dropped > 0, "no cut found anything pending: the model dropped nothing"
    assert len(list((root / "commitlog").iterdir())) > 1  # the writers rolled files
