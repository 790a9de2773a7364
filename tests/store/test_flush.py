from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lakemq.store.acks import PutAcks
from lakemq.store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType
from lakemq.store.flush import FlushRealTimeService
from lakemq.store.group_commit import GroupCommit
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_message

Open = Callable[..., CommitLog]


def test_group_commit_serves_many_writers_with_few_flushes(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20)
    cl.recover_normally()
    cl.start()
    results: list[PutMessageStatus] = []
    ends: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(50):
            r = cl.put(MessagesPut.of(make_message(body=b"s" * 200)))
            assert r.append_result is not None
            # Acknowledged means flushed: the flushed position is already past the record.
            assert cl.flushed_where >= r.append_result.next_offset
            with lock:
                results.append(r.status)
                ends.append(r.append_result.next_offset)

    threads = [threading.Thread(target=writer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [PutMessageStatus.PUT_OK] * 800
    service = cl.flush_service
    assert isinstance(service, GroupCommit)
    assert 0 < service.flush_count < 800  # grouped: far fewer fdatasyncs than puts


def test_wait_false_does_not_wait(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1 << 16)
    acks = PutAcks(50, [GroupCommit(queue)])  # never started: nothing will flush
    queue.get_last_mapped_file().append(b"x" * 10)  # type: ignore[union-attr]
    assert acks.wait(10, wait=False) is PutMessageStatus.PUT_OK
    start = time.monotonic()
    assert acks.wait(10, wait=True) is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert time.monotonic() - start >= 0.045
    queue.shutdown()


def test_async_flush_least_pages_and_shutdown_flush(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1 << 16)
    checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
    service = FlushRealTimeService(queue, interval_ms=10, least_pages=4, thorough_interval_ms=60_000,
                                   checkpoint=checkpoint)
    service.start()
    mf = queue.get_last_mapped_file()
    assert mf is not None
    mf.append(b"a" * 100)
    mf.store_timestamp = 1234
    time.sleep(0.1)
    assert queue.flushed_where == 0  # under 4 dirty pages: waits for more
    mf.append(b"b" * 4 * 4096)
    mf.store_timestamp = 5678
    deadline = time.monotonic() + 5
    while queue.flushed_where == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.flushed_where == 100 + 4 * 4096
    assert checkpoint.physic_msg_timestamp == 5678
    mf.append(b"c")
    service.shutdown()
    assert queue.flushed_where == queue.get_max_offset()
    queue.shutdown()
    checkpoint.shutdown()


def test_checkpoint_layout_and_min_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(path)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 100_000, 90_000, 50_000
    assert cp.min_timestamp() == 87_000
    assert cp.min_timestamp_index() == 50_000
    cp.shutdown()
    raw = path.read_bytes()
    assert len(raw) == CHECKPOINT_FILE_SIZE
    assert [int.from_bytes(raw[i : i + 8], "big") for i in (0, 8, 16)] == [100_000, 90_000, 50_000]
    again = StoreCheckpoint(path)
    assert again.logics_msg_timestamp == 90_000
    again.shutdown()


def test_sink_puts_complete_when_flushed(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20)
    cl.recover_normally()
    cl.start()
    acked: dict[int, PutMessageStatus] = {}
    acked_changed = threading.Condition()

    # The commit thread may acknowledge the first puts while later ones are still being made.
    def sink(acks: list[tuple[Any, PutMessageStatus]]) -> None:
        with acked_changed:
            acked.update(acks)
            acked_changed.notify_all()

    results = [cl.put(MessagesPut.of(make_message(body=b"a" * 300)), sink, i) for i in range(500)]
    results.append(cl.put(MessagesPut.of(*[make_message(body=b"b") for _ in range(5)]), sink, 500))
    pending = {i for i, r in enumerate(results) if r.pending}
    with acked_changed:
        assert acked_changed.wait_for(lambda: pending <= acked.keys(), 5)
        assert acked.keys() == pending
    done = {**acked, **{i: r.status for i, r in enumerate(results) if not r.pending}}
    assert set(done.values()) == {PutMessageStatus.PUT_OK} and len(done) == 501
    assert cl.flushed_where >= max(r.append_result.next_offset for r in results)  # type: ignore[union-attr]
    service = cl.flush_service
    assert isinstance(service, GroupCommit) and service.flush_count < 500
    refused = cl.put(MessagesPut.of(make_message(topic="bad topic")), sink, "refused")
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and not refused.pending
    cl.shutdown()


def test_sink_put_flushed_or_timed_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = MappedFileQueue(tmp_path, 1 << 16)
    group_commit = GroupCommit(queue)
    acks = PutAcks(50, [group_commit])
    mf = queue.get_last_mapped_file()
    assert mf is not None
    mf.append(b"x" * 10)
    statuses: dict[str, PutMessageStatus] = {}
    answered = threading.Condition()

    def sink(done: list[tuple[Any, PutMessageStatus]]) -> None:
        with answered:
            statuses.update(done)
            answered.notify_all()

    def answer(token: str) -> PutMessageStatus:
        with answered:
            assert answered.wait_for(lambda: token in statuses, 5)
        return statuses[token]

    assert acks.register(10, True, sink, "flushed") is None  # pending until the services run
    group_commit.start()
    acks.start()
    assert answer("flushed") is PutMessageStatus.PUT_OK
    # A stuck disk: the next fdatasync takes longer than the timeout. advance() hands the
    # delay to the commit thread (PutAcks' thread calls it too, every 10 ms).
    monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "400")
    group_commit.advance()
    mf.append(b"y" * 10)
    assert acks.register(20, True, sink, "stuck") is None
    assert answer("stuck") is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert queue.flushed_where < 20
    assert acks.register(5, False, sink, "no_wait") is PutMessageStatus.PUT_OK
    group_commit.shutdown()
    acks.shutdown()
    assert queue.flushed_where == 20  # the last flush still made it durable
    queue.shutdown()


def test_flush_listener_hears_every_flushed_byte(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20)
    cl.recover_normally()
    heard: list[tuple[float, int]] = []
    cl.flush_service.flush_listener = lambda seconds, flushed: heard.append((seconds, flushed))
    cl.start()
    try:
        for _ in range(20):
            assert cl.put(MessagesPut.of(make_message(body=b"f" * 300))).status == PutMessageStatus.PUT_OK
    finally:
        cl.shutdown()
    assert heard and all(seconds >= 0 and flushed > 0 for seconds, flushed in heard)
    assert sum(flushed for _, flushed in heard) == cl.flushed_where == cl.get_max_offset()


@pytest.mark.parametrize("flush_type", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_flushes_publish_the_flushed_offset_for_tiering(tmp_path: Path, flush_type: FlushDiskType) -> None:
    """What a tier process reading the store while the broker runs learns from the checkpoint
    file: how far the CommitLog is on disk, never past it (lakemq.tiering.seal)."""
    from lakemq.store.checkpoint import read_flushed_offset
    from lakemq.store.config import StoreConfig

    config = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=64 * 1024,
                         max_message_size=16 * 1024, flush_disk_type=flush_type, flush_interval_commit_log=10,
                         flush_commit_log_thorough_interval=50)
    checkpoint = StoreCheckpoint(config.checkpoint_path)
    cl = CommitLog(config, store_host="10.1.2.3:10911", checkpoint=checkpoint)
    cl.load()
    cl.recover_normally()
    cl.start()
    try:
        end = 0
        for _ in range(20):
            r = cl.put(MessagesPut.of(make_message(body=b"f" * 300)))
            assert r.append_result is not None
            end = r.append_result.next_offset
        deadline = time.monotonic() + 10
        while read_flushed_offset(config.checkpoint_path) < end:
            assert time.monotonic() < deadline, "the flushed offset never reached the checkpoint file"
            time.sleep(0.01)
        assert read_flushed_offset(config.checkpoint_path) <= cl.flushed_where
    finally:
        cl.shutdown()
        checkpoint.shutdown()
    assert read_flushed_offset(config.checkpoint_path) == end
