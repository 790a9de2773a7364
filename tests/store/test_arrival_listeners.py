"""Message-arriving listeners: told once per dispatched batch, with every message that got a
ConsumeQueue entry, in order."""

from __future__ import annotations

from pathlib import Path

from lakemq.common.message import MessageSysFlag, tags_hash_code
from lakemq.store.dispatch import Arrival
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_msg, open_store, wait_dispatched


def test_one_call_per_dispatched_batch_with_every_arrival(tmp_path: Path) -> None:
    store = open_store(tmp_path, mapped_file_size_commit_log=1 << 20)
    calls: list[list[Arrival]] = []
    store.message_arriving_listeners.append(calls.append)
    try:
        batch = [make_msg("TopicA", b"m%d" % i, queue_id=1, tags=("x", "y")[i % 2]) for i in range(100)]
        # One batch append is published at once, so the reput finds all of it in one pass.
        assert store.put(MessagesPut.of(*batch)).append_result is not None
        wait_dispatched(store)
        assert len(calls) == 1
        assert [(t, q, off, code) for t, q, off, code, _ in calls[0]] == [
            ("TopicA", 1, i + 1, tags_hash_code(("x", "y")[i % 2])) for i in range(100)]
        assert all(ts > 0 for *_, ts in calls[0])
        # Prepared and rolled-back halves get no ConsumeQueue entry: nobody is told of them.
        store.put(MessagesPut.of(make_msg("TopicA", b"half", queue_id=1, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)))
        store.put(MessagesPut.of(make_msg("TopicA", b"gone", queue_id=1, sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)))
        store.put(MessagesPut.of(make_msg("TopicA", b"next", queue_id=1)))
        wait_dispatched(store)
        assert [a[:3] for c in calls[1:] for a in c] == [("TopicA", 1, 101)]
    finally:
        store.shutdown()


def test_a_failing_listener_does_not_stop_dispatch_or_the_others(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    seen: list[Arrival] = []

    def broken(_arrivals: list[Arrival]) -> None:
        raise RuntimeError("listener bug")

    store.message_arriving_listeners.extend([broken, seen.extend])
    try:
        for i in range(3):
            store.put(MessagesPut.of(make_msg("TopicB", b"%d" % i)))
        wait_dispatched(store)
        assert [a[2] for a in seen] == [1, 2, 3]
        assert store.get_max_offset_in_queue("TopicB", 0) == 3
    finally:
        store.shutdown()
