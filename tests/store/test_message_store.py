"""MessageStore facade: put, pull with filters and statuses, lookups, queries, restart, expiry."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from lakemq.common.message import MessageSysFlag, tags_hash_code
from lakemq.common.record import decode_record
from lakemq.errors import InvalidNameError, StoreError
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_msg, open_store, small_config, wait_dispatched


class TagFilter:
    def __init__(self, tag: str) -> None:
        self.code = tags_hash_code(tag)

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        return tags_code == self.code

    def is_matched_by_commit_log(self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None) -> bool:
        return True


class BodyFilter:
    """A commit-log filter (SQL92 stand-in) that looks at the record itself."""

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        return True

    def is_matched_by_commit_log(self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None) -> bool:
        assert msg_buffer is not None
        return decode_record(msg_buffer).body.endswith(b"0")


def test_put_get_and_statuses(tmp_path: Path) -> None:
    store = open_store(tmp_path, mapped_file_size_commit_log=1024)
    try:
        for i in range(30):
            r = store.put(MessagesPut.of(make_msg("TopicA", b"body-%d" % i, queue_id=1, tags="even" if i % 2 == 0 else "odd")))
            assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
            assert r.append_result.logics_offset == i
        wait_dispatched(store)
        got = store.get_message("g", "TopicA", 1, 0, 10)
        assert got.status is GetMessageStatus.FOUND
        assert [decode_record(b).body for b in got.buffers] == [b"body-%d" % i for i in range(10)]
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (10, 0, 30)
        # the records span several 1 KiB CommitLog files
        assert len(store.commit_log.mapped_file_queue.mapped_files) > 1
        got = store.get_message("g", "TopicA", 1, 25, 32)
        assert got.msg_count == 5 and got.next_begin_offset == 30
        odd = store.get_message("g", "TopicA", 1, 0, 5, TagFilter("odd"))
        assert [decode_record(b).body for b in odd.buffers] == [b"body-%d" % i for i in (1, 3, 5, 7, 9)]
        assert odd.next_begin_offset == 10
        assert store.get_message("g", "TopicA", 1, 0, 5, TagFilter("none")).status is GetMessageStatus.NO_MATCHED_MESSAGE
        by_body = store.get_message("g", "TopicA", 1, 0, 3, BodyFilter())
        # one pull reads within one ConsumeQueue file (10 entries here), as RocketMQ does
        assert [decode_record(b).body for b in by_body.buffers] == [b"body-0"]
        assert by_body.next_begin_offset == 10
        by_body = store.get_message("g", "TopicA", 1, 10, 3, BodyFilter())
        assert [decode_record(b).body for b in by_body.buffers] == [b"body-10"]
        assert store.get_message("g", "TopicA", 1, 30, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        bad = store.get_message("g", "TopicA", 1, 99, 5)
        # RocketMQ's correction: back to the min offset when it is 0, else to the max
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
        assert store.get_message("g", "TopicA", 7, 0, 5).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_message("g", "Nope", 0, 0, 5).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    finally:
        store.shutdown()


def test_lookups_queries_and_times(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        t0 = int(time.time() * 1000)
        results = [store.put(MessagesPut.of(make_msg("TopicB", b"m%d" % i, keys=f"k{i % 3} all", uniq=f"UNIQ{i}")))
                   for i in range(12)]
        wait_dispatched(store)
        first = results[0].append_result
        assert first is not None
        msg = store.look_message_by_offset(first.wrote_offset)
        assert msg is not None and msg.body == b"m0" and msg.msg_id == first.msg_id
        assert store.look_message_by_offset(first.wrote_offset + 1) is None
        assert store.look_message_by_offset(10**12) is None
        found = store.query_message("TopicB", "k1", 32, 0, 2**62)
        assert [decode_record(b).body for b in found.messages] == [b"m10", b"m7", b"m4", b"m1"]
        assert len(store.query_message("TopicB", "all", 5, 0, 2**62).messages) == 5
        assert store.query_message("TopicB", "k9", 32, 0, 2**62).messages == []
        assert store.query_message("Other", "k1", 32, 0, 2**62).messages == []
        viewed = store.view_message_by_id(results[5].append_result.msg_id)  # type: ignore[union-attr]
        assert viewed is not None and viewed.body == b"m5"
        by_uniq = store.view_message_by_id("UNIQ6", topic="TopicB")
        assert by_uniq is not None and by_uniq.body == b"m6"
        assert store.view_message_by_id("00" * 16) is None
        assert store.get_offset_in_queue_by_time("TopicB", 0, t0 - 10_000) == 0
        assert store.get_offset_in_queue_by_time("TopicB", 0, int(time.time() * 1000) + 10_000) == 12
        assert store.get_commit_log_offset_in_queue("TopicB", 0, 0) == first.wrote_offset
        assert store.get_message_store_timestamp("TopicB", 0, 0) == first.store_timestamp
        assert store.get_earliest_message_time("TopicB", 0) == first.store_timestamp
        assert store.get_max_phy_offset() == results[-1].append_result.next_offset  # type: ignore[union-attr]
    finally:
        store.shutdown()


def test_transaction_records_and_listeners(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    arrivals: list[tuple[str, int, int]] = []
    store.message_arriving_listeners.append(lambda batch: arrivals.extend((t, q, off) for t, q, off, _, _ in batch))
    try:
        store.put(MessagesPut.of(make_msg("TopicT", b"normal")))
        store.put(MessagesPut.of(make_msg("TopicT", b"half", keys="tx", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)))
        store.put(MessagesPut.of(make_msg("TopicT", b"gone", keys="tx", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)))
        store.put(MessagesPut.of(make_msg("TopicT", b"commit", sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE)))
        wait_dispatched(store)
        got = store.get_message("g", "TopicT", 0, 0, 10)
        assert [decode_record(b).body for b in got.buffers] == [b"normal", b"commit"]
        assert arrivals == [("TopicT", 0, 1), ("TopicT", 0, 2)]
        # prepared records are indexed (the check-back finds them), rollback records are not
        assert [decode_record(b).body for b in store.query_message("TopicT", "tx", 8, 0, 2**62).messages] == [b"half"]
    finally:
        store.shutdown()


def test_restart_keeps_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(15):
        store.put(MessagesPut.of(make_msg("TopicC", b"x%d" % i, queue_id=i % 2, keys=f"key{i}")))
    store.shutdown()
    assert not (tmp_path / "abort").exists()
    store = open_store(tmp_path)
    try:
        assert store.last_exit_ok
        assert store.get_max_offset_in_queue("TopicC", 0) == 8
        r = store.put(MessagesPut.of(make_msg("TopicC", b"after", queue_id=0)))
        assert r.append_result is not None and r.append_result.logics_offset == 8
        wait_dispatched(store)
        assert len(store.get_message("g", "TopicC", 0, 0, 32).buffers) == 9
        assert len(store.query_message("TopicC", "key14", 4, 0, 2**62).messages) == 1
    finally:
        store.shutdown()


def test_bad_input_is_refused_clearly(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        r = store.put(MessagesPut.of(make_msg("../../etc", b"x")))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "invalid topic" in r.remark
        with pytest.raises(InvalidNameError):
            store.get_message("g", "../escape", 0, 0, 1)
        with pytest.raises(InvalidNameError):
            store.query_message("a/b", "k", 1, 0, 1)
        with pytest.raises(ValueError):
            store.get_message("g", "TopicA", -1, 0, 1)
        with pytest.raises(InvalidNameError):
            store.get_max_offset_in_queue("..", 0)
        assert {p.name for p in tmp_path.iterdir()} <= {"abort", "checkpoint", "commitlog", "index", "consumequeue"}
        assert not (tmp_path / "consumequeue").exists()  # nothing was created for the bad names
        assert not (tmp_path.parent / "escape").exists() and not (tmp_path.parent / "etc").exists()
    finally:
        store.shutdown()
    stopped = store.put(MessagesPut.of(make_msg("TopicA", b"late")))
    assert stopped.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_expired_files_are_deleted_within_the_guard(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        for i in range(60):
            store.put(MessagesPut.of(make_msg("TopicE", b"e" * 200, keys=f"k{i}")))
        wait_dispatched(store)
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 4
        guard_end = files[1].file_end_offset
        store.set_retention_guard(lambda: guard_end)  # tiering has only copied the first two files
        assert store.clean_service.clean_once(force=True) >= 2
        assert store.get_min_phy_offset() == guard_end
        min_q = store.get_min_offset_in_queue("TopicE", 0)
        assert min_q > 0
        assert store.get_message("g", "TopicE", 0, 0, 1).status is GetMessageStatus.OFFSET_TOO_SMALL
        got = store.get_message("g", "TopicE", 0, min_q, 1)
        assert got.status is GetMessageStatus.FOUND
        assert decode_record(got.buffers[0]).commit_log_offset >= guard_end
        assert store.query_message("TopicE", "k0", 4, 0, 2**62).messages == []
    finally:
        store.shutdown()


def test_lost_consume_queues_over_an_expired_commit_log_are_not_rebuilt_at_used_offsets(tmp_path: Path) -> None:
    """With the oldest CommitLog files gone, rebuilding the queues from what is left would
    restart a queue whose records were all in them at 0: the store refuses to load."""
    store = open_store(tmp_path)
    try:
        for i in range(60):
            store.put(MessagesPut.of(make_msg("TopicGone" if i < 20 else "TopicStays", b"e" * 200)))
        wait_dispatched(store)
        assert store.clean_service.clean_once(force=True) >= 2
        assert store.get_min_phy_offset() > 0
    finally:
        store.shutdown()
    shutil.rmtree(tmp_path / "consumequeue")
    again = MessageStore(small_config(tmp_path))
    with pytest.raises(StoreError, match="holds no queue but the CommitLog starts at offset .*lakemq reindex"):
        again.load()


def test_concurrent_producers_and_a_consumer(tmp_path: Path) -> None:
    import threading

    store = open_store(tmp_path, mapped_file_size_commit_log=8192)
    received: dict[int, list[bytes]] = {0: [], 1: []}
    done = threading.Event()

    def consume() -> None:
        offsets = {0: 0, 1: 0}
        while not done.is_set() or any(offsets[q] < store.get_max_offset_in_queue("TopicP", q) for q in (0, 1)):
            for q in (0, 1):
                got = store.get_message("g", "TopicP", q, offsets[q], 16)
                if got.status is GetMessageStatus.FOUND:
                    received[q].extend(decode_record(b, check_crc=True).body for b in got.buffers)
                    offsets[q] = got.next_begin_offset
            time.sleep(0.001)

    def produce(p: int) -> None:
        for i in range(150):
            assert store.put(MessagesPut.of(make_msg("TopicP", b"%d-%d" % (p, i), queue_id=i % 2))).is_ok

    consumer = threading.Thread(target=consume)
    consumer.start()
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    try:
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        wait_dispatched(store)
        done.set()
        consumer.join(10)
        assert not consumer.is_alive()
        for q in (0, 1):
            assert len(received[q]) == 300 == len(set(received[q]))
            for p in range(4):  # each producer's messages keep their order within a queue
                mine = [int(b.split(b"-")[1]) for b in received[q] if b.startswith(b"%d-" % p)]
                assert mine == sorted(mine) and len(mine) == 75
    finally:
        done.set()
        store.shutdown()
