"""LoopAcks with the store's AckWatch: SYNC_FLUSH puts made on an event loop are acknowledged
by the loop itself when the commit thread's eventfd turns readable (no other thread hands
them over), each only once flushed; closing the watch hands acknowledgements back to
PutAcks' thread. With the store's inline flush the loop also flushes its own puts, once per
turn; a slow flush (until its pause ends), the fault tests' slow disk, a blocking put and a
close hand flushing back to the commit thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakemq.broker.loop_acks import LoopAcks
from lakemq.common.message import MessageExtBrokerInner
from lakemq.store import group_commit
from lakemq.store.acks import AckSink, AckWatch
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus


class SpyAcks(LoopAcks):
    """Records the thread of every delivery and the flushed position at that moment; with
    ``inline``, the loop flushes its own puts and every inline flush is recorded: its thread,
    the end written before it, and where the log was durable when it returned."""

    def __init__(self, cl: CommitLog, inline: bool = False) -> None:
        self.cl = cl
        self.deliveries: list[tuple[int, int]] = []
        self.opened: list[AckWatch | None] = []  # the watch the store opened for it
        self.flushes: list[tuple[int, int, int]] = []
        if inline:
            super().__init__(asyncio.get_running_loop(), self._open, cl.flush_inline, self._flush_now)
        else:
            super().__init__(asyncio.get_running_loop(), self._open)

    def _flush_now(self, quiet_fd: int) -> None:
        written = self.cl.get_max_offset()
        self.cl.flush_now(quiet_fd)
        assert isinstance(self.cl.flush_service, group_commit.GroupCommit)
        self.flushes.append((threading.get_ident(), written, self.cl.flush_service.advance()))

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        self.deliveries.append((threading.get_ident(), self.cl.flushed_where))
        super().__call__(acks)

    def _open(self, sink: AckSink) -> AckWatch | None:
        watch = self.cl.open_ack_watch(sink)
        self.opened.append(watch)
        return watch


@pytest.fixture
def sync_log(tmp_path: Path) -> Iterator[CommitLog]:
    yield from _sync_log(tmp_path)


@pytest.fixture
def slow_sync_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CommitLog]:
    """A SYNC_FLUSH log whose disk is the fault tests' slow one (20 ms per fdatasync)."""
    monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "20")
    yield from _sync_log(tmp_path)


def _sync_log(tmp_path: Path) -> Iterator[CommitLog]:
    config = StoreConfig(store_path_root_dir=str(tmp_path), flush_disk_type=FlushDiskType.SYNC_FLUSH,
                         mapped_file_size_commit_log=1 << 20)
    cl = CommitLog(config)
    cl.load()
    cl.recover_normally()
    cl.start()
    yield cl
    cl.shutdown()


async def _put_all(cl: CommitLog, acks: LoopAcks, writers: int = 8, each: int = 20) -> list[tuple[int, PutMessageStatus]]:
    """``writers`` coroutines each putting and awaiting ``each`` messages; (end, status) per put."""
    out: list[tuple[int, PutMessageStatus]] = []

    async def writer(n: int) -> None:
        for i in range(each):
            future = acks.future()
            msg = MessageExtBrokerInner(topic="LoopAcks", body=f"{n}-{i}".encode() * 20, queue_id=n % 4)
            result = cl.put(MessagesPut.of(msg), acks, future)
            assert result.append_result is not None
            if result.pending:
                status = await future
            else:
                status = result.status
            assert cl.flushed_where >= result.append_result.next_offset  # acknowledged means flushed
            out.append((result.append_result.next_offset, status))

    await asyncio.gather(*(writer(n) for n in range(writers)))
    return out


async def _put_all_inline(cl: CommitLog, writers: int = 8, each: int = 20) -> SpyAcks:
    """:func:`_put_all` with the loop flushing its own puts; every put must be PUT_OK."""
    acks = SpyAcks(cl, inline=True)
    try:
        results = await _put_all(cl, acks, writers=writers, each=each)
    finally:
        acks.close()
    assert [s for _, s in results] == [PutMessageStatus.PUT_OK] * (writers * each)
    return acks


async def test_the_loop_acknowledges_its_own_puts(sync_log: CommitLog) -> None:
    acks = SpyAcks(sync_log)
    try:
        results = await _put_all(sync_log, acks)
    finally:
        acks.close()
    assert [s for _, s in results] == [PutMessageStatus.PUT_OK] * 160
    assert acks.deliveries, "no put waited for a flush"
    loop_thread = threading.get_ident()
    assert {thread for thread, _ in acks.deliveries} == {loop_thread}


async def test_a_busy_loop_still_acknowledges_its_own_puts(sync_log: CommitLog) -> None:
    """The service's thread wakes every 10 ms; while the loop is busy it must leave the
    flushed puts of the watched sink to the loop (it completes only those past their
    deadline)."""
    acks = SpyAcks(sync_log)
    try:
        futures = []
        for i in range(20):
            future = acks.future()
            msg = MessageExtBrokerInner(topic="LoopAcks", body=b"busy" * 30, queue_id=i % 4)
            assert sync_log.put(MessagesPut.of(msg), acks, future).pending
            futures.append(future)
        time.sleep(0.1)  # noqa: ASYNC251 - the loop is busy on purpose; the service wakes 10 times
        assert await asyncio.gather(*futures) == [PutMessageStatus.PUT_OK] * 20
    finally:
        acks.close()
    assert {thread for thread, _ in acks.deliveries} == {threading.get_ident()}


async def test_other_sinks_are_answered_while_the_loop_is_busy(sync_log: CommitLog) -> None:
    """A watch leaves only its own sink's puts to its loop: another sink's put is answered
    by PutAcks' thread while the loop is busy."""
    acks = SpyAcks(sync_log)
    try:
        assert acks.opened[0] is not None
        future = acks.future()
        msg = MessageExtBrokerInner(topic="LoopAcks", body=b"loop" * 30, queue_id=0)
        assert sync_log.put(MessagesPut.of(msg), acks, future).pending
        other: list[tuple[Any, PutMessageStatus]] = []
        answered = threading.Event()

        def other_sink(done: list[tuple[Any, PutMessageStatus]]) -> None:
            other.extend(done)
            answered.set()

        put = sync_log.put(MessagesPut.of(MessageExtBrokerInner(topic="LoopAcks", body=b"other", queue_id=1)),
                           other_sink, "other")
        # The loop does not run meanwhile; the deadline (syncFlushTimeout) is seconds away.
        assert not put.pending or answered.wait(1)
        assert other == ([("other", PutMessageStatus.PUT_OK)] if put.pending else [])
        assert await future is PutMessageStatus.PUT_OK
    finally:
        acks.close()
    assert {thread for thread, _ in acks.deliveries} == {threading.get_ident()}


async def test_closing_the_watch_hands_acknowledgements_back(sync_log: CommitLog) -> None:
    acks = SpyAcks(sync_log)
    watch = acks.opened[0]
    assert watch is not None
    acks.close()
    assert watch.closed
    watch.on_readable()  # a late wake-up after the close is ignored
    results = await _put_all(sync_log, acks, writers=4, each=10)
    assert [s for _, s in results] == [PutMessageStatus.PUT_OK] * 40
    assert acks.deliveries
    assert threading.get_ident() not in {thread for thread, _ in acks.deliveries}  # the service's thread


def test_a_watch_left_open_is_closed_by_the_store(tmp_path: Path) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path), flush_disk_type=FlushDiskType.SYNC_FLUSH)
    cl = CommitLog(config)
    cl.load()
    cl.recover_normally()
    cl.start()
    watch = cl.open_ack_watch(lambda acks: None)
    assert watch is not None
    cl.shutdown()
    assert watch.closed
    watch.on_readable()  # a loop that still watches it gets nothing, and no error


def test_async_flush_has_no_watch(tmp_path: Path) -> None:
    cl = CommitLog(StoreConfig(store_path_root_dir=str(tmp_path)))
    cl.load()
    assert cl.open_ack_watch(lambda acks: None) is None


async def test_the_loop_flushes_its_own_puts(sync_log: CommitLog) -> None:
    acks = await _put_all_inline(sync_log)
    loop_thread = threading.get_ident()
    assert acks.flushes and {thread for thread, _, _ in acks.flushes} == {loop_thread}
    assert all(durable >= written for _, written, durable in acks.flushes)  # durable when it returns
    assert len(acks.flushes) < 160 / 2  # one fdatasync covers the turn's puts
    assert {thread for thread, _ in acks.deliveries} == {loop_thread}


async def test_a_slow_inline_flush_hands_the_loops_puts_to_the_thread(
        sync_log: CommitLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_commit, "_INLINE_SLOW_NS", -1)  # every fdatasync counts as slow
    acks = await _put_all_inline(sync_log, writers=4, each=10)
    assert len(acks.flushes) == 1  # the first; the commit thread flushed the rest
    assert {thread for thread, _ in acks.deliveries} == {threading.get_ident()}


async def test_the_loop_flushes_inline_again_after_its_pause(
        sync_log: CommitLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_commit, "_INLINE_SLOW_NS", -1)  # every fdatasync counts as slow
    monkeypatch.setattr(group_commit, "_INLINE_PAUSE_FIRST_S", 0.0)  # and the pause ends at once
    acks = await _put_all_inline(sync_log, writers=4, each=10)
    assert len(acks.flushes) > 1 and {thread for thread, _, _ in acks.flushes} == {threading.get_ident()}


async def test_the_pause_doubles_while_inline_flushes_stay_slow_and_a_fast_one_resets_it(
        sync_log: CommitLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """One slow fdatasync (a hiccup of the host) costs a short pause, a disk that stays slow
    longer and longer ones, up to the maximum."""
    commit = sync_log.flush_service
    assert isinstance(commit, group_commit.GroupCommit)
    monkeypatch.setattr(group_commit, "_INLINE_SLOW_NS", -1)  # every fdatasync counts as slow
    monkeypatch.setattr(group_commit, "_INLINE_PAUSE_FIRST_S", 0.0005)
    monkeypatch.setattr(group_commit, "_INLINE_PAUSE_MAX_S", 0.004)
    acks = SpyAcks(sync_log, inline=True)
    try:
        pauses = []
        for _ in range(6):
            await _put_all(sync_log, acks, writers=1, each=1)
            pauses.append(commit._inline_pause_s)
            await asyncio.sleep(0.005)  # past any pause: the next put is flushed on the loop
        assert pauses == [0.001, 0.002, 0.004, 0.004, 0.004, 0.004]
        monkeypatch.setattr(group_commit, "_INLINE_SLOW_NS", 10**12)  # the disk is fast again
        await _put_all(sync_log, acks, writers=1, each=1)
        assert commit._inline_pause_s == 0.0  # the next pause is the first's again
    finally:
        acks.close()


async def test_a_slow_disk_of_the_fault_tests_is_flushed_by_the_thread(slow_sync_log: CommitLog) -> None:
    acks = await _put_all_inline(slow_sync_log, writers=4, each=5)
    assert not acks.flushes  # the loop never blocked on the slow disk


async def test_a_blocking_put_on_the_flushing_loop_is_flushed(sync_log: CommitLog) -> None:
    """A put without a sink waits for its flush on the calling thread, so that thread cannot
    flush it later in its turn: the commit thread does, well before the deadline."""
    acks = SpyAcks(sync_log, inline=True)
    try:
        started = time.monotonic()
        result = sync_log.put(MessagesPut.of(MessageExtBrokerInner(topic="LoopAcks", body=b"blocking", queue_id=0)))
        assert result.status is PutMessageStatus.PUT_OK and time.monotonic() - started < 1.0
        assert result.append_result is not None and sync_log.flushed_where >= result.append_result.next_offset
    finally:
        acks.close()


async def test_closing_hands_unflushed_puts_to_the_thread(sync_log: CommitLog) -> None:
    acks = SpyAcks(sync_log, inline=True)
    future = acks.future()
    msg = MessageExtBrokerInner(topic="LoopAcks", body=b"closing", queue_id=0)
    result = sync_log.put(MessagesPut.of(msg), acks, future)
    assert result.pending
    acks.close()  # before the loop's turn ends: its inline flush never runs
    assert await asyncio.wait_for(future, 2.0) is PutMessageStatus.PUT_OK
    assert not acks.flushes
    assert result.append_result is not None and sync_log.flushed_where >= result.append_result.next_offset
