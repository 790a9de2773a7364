"""A pull's compiled read (lakemq/store/_reads.pyx, QueueReader._gather) against the Python
read it stands in for (QueueReader._read_queue): for the same store, offsets, limits and tag
filters both answer the same status, offsets and records, across CommitLog and ConsumeQueue
files, blank entries and expired files."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import tags_hash_code
from lakemq.store import queue_read
from lakemq.store.get_results import GetMessageResult, GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_msg, open_store, wait_dispatched

TAGS = ("a", "b", "c", None)


class _Tags:
    """A tag filter that decides by tags code, with or without saying so (code_set)."""

    def __init__(self, tags: frozenset[str] | None) -> None:
        self.codes = None if tags is None else frozenset(tags_hash_code(t) for t in tags)

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        return self.codes is None or tags_code in self.codes

    def is_matched_by_commit_log(self, msg_buffer: object, properties: object) -> bool:
        return True


class _CompiledTags(_Tags):
    def code_set(self) -> frozenset[int] | None:
        return self.codes


def _fill(store: MessageStore, tags: list[str | None], queues: int) -> None:
    for i, tag in enumerate(tags):
        result = store.put(MessagesPut.of(make_msg("TopicR", bytes([i % 251]) * (20 + i % 70), queue_id=i % queues,
                                                   tags=tag)))
        assert result.is_ok
    wait_dispatched(store)


def _outcome(result: GetMessageResult) -> tuple[object, ...]:
    return (result.status, result.next_begin_offset, result.min_offset, result.max_offset, result.buffers,
            result.msg_count, result.buffer_total_size, result.suggest_pulling_from_slave)


def _both(store: MessageStore, queue: int, offset: int, nums: int, max_bytes: int,
          tags: frozenset[str] | None) -> tuple[GetMessageResult, GetMessageResult]:
    compiled = store.get_message("g", "TopicR", queue, offset, nums, _CompiledTags(tags), max_bytes)
    python = store.get_message("g", "TopicR", queue, offset, nums, _Tags(tags), max_bytes)
    return compiled, python


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(TAGS), min_size=1, max_size=120), st.integers(1, 3), st.data())
def test_compiled_and_python_reads_agree(tmp_path_factory, tags: list[str | None], queues: int,
                                         data: st.DataObject) -> None:
    root = Path(tmp_path_factory.mktemp("reads"))
    # Small files: records and ConsumeQueue entries spread over many of both.
    store = open_store(root, mapped_file_size_commit_log=2048, mapped_file_size_consume_queue=8 * 20,
                       max_transfer_count_on_message_in_memory=data.draw(st.integers(1, 40)),
                       max_transfer_bytes_on_message_in_memory=data.draw(st.integers(100, 5000)))
    try:
        _fill(store, tags, queues)
        for _ in range(8):
            queue = data.draw(st.integers(0, queues - 1))
            offset = data.draw(st.integers(0, len(tags) // queues + 2))
            nums = data.draw(st.integers(1, 40))
            max_bytes = data.draw(st.integers(50, 6000))
            wanted = data.draw(st.one_of(st.none(), st.frozensets(st.sampled_from(("a", "b", "c")))))
            compiled, python = _both(store, queue, offset, nums, max_bytes, wanted)
            assert _outcome(compiled) == _outcome(python)
    finally:
        store.shutdown()


def test_the_compiled_read_is_taken_and_joins_records(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path, mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=100 * 20)
    try:
        _fill(store, ["a", "b"] * 20, 1)
        calls = []
        real = queue_read.gather_records
        monkeypatch.setattr(queue_read, "gather_records", lambda *a: calls.append(a) or real(*a))
        found = store.get_message("g", "TopicR", 0, 0, 32, _CompiledTags(frozenset({"a"})))
        assert calls and found.status is GetMessageStatus.FOUND and found.msg_count == 20
        assert not found.added and found.body_count == 20 and found.joined() == b"".join(found.buffers)
        python = store.get_message("g", "TopicR", 0, 0, 32, _Tags(frozenset({"a"})))
        assert python.added == found.buffers and python.joined() == found.joined()
    finally:
        store.shutdown()


def test_a_record_in_an_expired_file_leaves_the_read_to_python(tmp_path: Path) -> None:
    store = open_store(tmp_path, mapped_file_size_commit_log=2048, mapped_file_size_consume_queue=100 * 20)
    try:
        _fill(store, ["a"] * 60, 1)
        first = store.commit_log.mapped_file_queue.mapped_files[0]
        gone_end = first.file_end_offset
        # The first CommitLog file goes (its ConsumeQueue entries stay): as a deletion race.
        store.commit_log.mapped_file_queue.mapped_files = store.commit_log.mapped_file_queue.mapped_files[1:]
        compiled, python = _both(store, 0, 0, 32, 1 << 20, None)
        assert _outcome(compiled) == _outcome(python)
        assert python.status in (GetMessageStatus.FOUND, GetMessageStatus.MESSAGE_WAS_REMOVING)
        assert all(int.from_bytes(r[28:36], "big") >= gone_end for r in python.buffers)
    finally:
        store.shutdown()


def test_with_a_retention_guard_a_read_stops_at_a_removed_record(tmp_path: Path) -> None:
    """Without a guard a read skips records whose CommitLog file is gone (RocketMQ: they are
    lost); with one (the lake holds them) it stops there, their offset next, so the broker can
    serve them from the lake instead of moving the consumer past them."""
    store = open_store(tmp_path, mapped_file_size_commit_log=2048, mapped_file_size_consume_queue=100 * 20)
    try:
        _fill(store, ["a"] * 60, 1)
        files = store.commit_log.mapped_file_queue.mapped_files
        gone_end = files[0].file_end_offset
        store.commit_log.mapped_file_queue.mapped_files = files[1:]  # as a deletion under the read
        first_live = next(i for i in range(60)
                          if store.consume_queues.find("TopicR", 0).get_unit(i).commit_log_offset >= gone_end)
        assert first_live > 0
        skipped = store.get_message("g", "TopicR", 0, 0, 32, _Tags(None))
        assert skipped.status is GetMessageStatus.FOUND and skipped.next_begin_offset > first_live
        store.set_retention_guard(lambda: gone_end)
        for tags in (_Tags(None), _CompiledTags(None), _Tags(frozenset({"a"}))):
            stopped = store.get_message("g", "TopicR", 0, 0, 32, tags)
            assert (stopped.status, stopped.next_begin_offset, stopped.msg_count) == (
                GetMessageStatus.MESSAGE_WAS_REMOVING, 0, 0)
        live = store.get_message("g", "TopicR", 0, first_live, 32, _Tags(None))
        assert live.status is GetMessageStatus.FOUND and live.msg_count > 0
    finally:
        store.shutdown()


def test_a_file_destroyed_under_a_read_is_a_removed_record(tmp_path: Path, monkeypatch) -> None:
    """Expiry destroys a CommitLog file after a reader looked it up: the read answers as for a
    removed record (both reads), not with the closed mapping's error."""
    store = open_store(tmp_path, mapped_file_size_commit_log=2048, mapped_file_size_consume_queue=100 * 20)
    try:
        _fill(store, ["a"] * 60, 1)
        files = store.commit_log.mapped_file_queue
        first = files.mapped_files[0]
        real = files.find_mapped_file_by_offset

        def found_then_destroyed(offset: int, return_first_on_not_found: bool = False):
            mf = real(offset, return_first_on_not_found)
            if mf is first:
                first.destroy()
            return mf

        monkeypatch.setattr(files, "find_mapped_file_by_offset", found_then_destroyed)
        compiled, python = _both(store, 0, 0, 32, 1 << 20, None)
        assert _outcome(compiled) == _outcome(python)
        assert python.status is GetMessageStatus.FOUND
        assert all(int.from_bytes(r[28:36], "big") >= first.file_end_offset for r in python.buffers)
        store.set_retention_guard(lambda: first.file_end_offset)
        stopped = store.get_message("g", "TopicR", 0, 0, 32, _CompiledTags(None))
        assert (stopped.status, stopped.next_begin_offset) == (GetMessageStatus.MESSAGE_WAS_REMOVING, 0)
    finally:
        store.shutdown()
