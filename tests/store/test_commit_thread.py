"""The compiled SYNC_FLUSH commit thread (lakemq/store/_group_commit.pyx) on real files: it
flushes what is published, file by file in order, announces every flush on its eventfds,
wakes each blocking waiter once its offset is durable, waits for a file it does not know
yet, reports a failing fdatasync, and flushes what was published before it stops."""

from __future__ import annotations

import errno
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakemq.store._group_commit import CommitThread

FILE = 4096


@pytest.fixture
def eventfd() -> Iterator[int]:
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    yield fd
    os.close(fd)


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Callable[[int], int]]:
    """Open a file of FILE bytes starting at a log offset; returns its descriptor."""
    opened: list[int] = []

    def open_file(start: int) -> int:
        fd = os.open(tmp_path / f"{start:020d}", os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, FILE)
        opened.append(fd)
        return fd

    yield open_file
    for fd in opened:
        os.close(fd)


def _announced(fd: int, timeout_s: float = 5.0) -> int:
    """The count on eventfd ``fd`` once it is readable (0 if it never is)."""
    if not select.select([fd], [], [], timeout_s)[0]:
        return 0
    return os.eventfd_read(fd)


def _commit_thread(eventfd: int) -> CommitThread:
    commit = CommitThread(0)
    commit.set_notify_fds([eventfd])
    return commit


def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_published_bytes_are_flushed_and_announced(eventfd: int, files: Callable[[int], int]) -> None:
    fd = files(0)
    commit = _commit_thread(eventfd)
    commit.add_file(fd, 0, FILE)
    commit.start()
    try:
        os.pwrite(fd, b"x" * 100, 0)
        commit.publish(100)
        assert _announced(eventfd) >= 1
        assert commit.flushed == 100 and commit.error == 0
        flushes = commit.take_flushes()
        assert sum(b for _, b in flushes) == 100 and all(s >= 0 for s, _ in flushes)
        assert commit.take_flushes() == []  # taken once
        commit.publish(50)  # older than what is published: nothing to do
        assert commit.flushed == 100
    finally:
        commit.stop()
    assert commit.flush_count == len(flushes)


def test_files_are_flushed_in_order_across_a_roll(eventfd: int, files: Callable[[int], int]) -> None:
    first, second = files(0), files(FILE)
    commit = _commit_thread(eventfd)
    commit.add_file(first, 0, FILE)
    commit.add_file(second, FILE, 2 * FILE)
    commit.start()
    try:
        commit.publish(FILE + 300)
        assert _until(lambda: commit.flushed == FILE + 300)
        # One fdatasync per file: the rest of the first, then the second up to the end.
        assert [b for _, b in commit.take_flushes()] == [FILE, 300]
    finally:
        commit.stop()


def test_an_end_past_the_known_files_waits_for_the_next_file(eventfd: int, files: Callable[[int], int]) -> None:
    commit = _commit_thread(eventfd)
    commit.add_file(files(0), 0, FILE)
    commit.start()
    try:
        commit.publish(FILE + 10)  # the roll's new file is not registered yet
        assert _until(lambda: commit.flushed == FILE)
        time.sleep(0.1)
        assert commit.flushed == FILE and commit.flush_count == 1  # waits, does not spin
        commit.add_file(files(FILE), FILE, 2 * FILE)
        assert _until(lambda: commit.flushed == FILE + 10)
    finally:
        commit.stop()


def test_a_first_file_past_the_flushed_position_starts_there(eventfd: int, files: Callable[[int], int]) -> None:
    commit = _commit_thread(eventfd)
    commit.add_file(files(3 * FILE), 3 * FILE, 4 * FILE)  # the older files were deleted
    assert commit.flushed == 3 * FILE
    commit.start()
    try:
        commit.publish(3 * FILE + 1)
        assert _until(lambda: commit.flushed == 3 * FILE + 1)
    finally:
        commit.stop()


def test_every_notify_fd_is_told_until_replaced(eventfd: int, files: Callable[[int], int]) -> None:
    other = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        commit = _commit_thread(eventfd)
        commit.add_file(files(0), 0, FILE)
        commit.set_notify_fds([eventfd, other])
        commit.start()
        try:
            commit.publish(10)
            assert _announced(eventfd) >= 1 and _announced(other) >= 1
            commit.set_notify_fds([other])
            commit.publish(20)
            assert _announced(other) >= 1
            assert _announced(eventfd, timeout_s=0.1) == 0  # replaced: never told again
            with pytest.raises(ValueError, match="at most"):
                commit.set_notify_fds([other] * 9)
        finally:
            commit.stop()
    finally:
        os.close(other)


def test_a_failing_fdatasync_is_reported_and_nothing_counts_as_flushed(eventfd: int) -> None:
    read_end, write_end = os.pipe()  # fdatasync of a pipe fails with EINVAL
    try:
        commit = _commit_thread(eventfd)
        commit.add_file(write_end, 0, FILE)
        commit.start()
        commit.publish(10)
        assert _until(lambda: commit.error == errno.EINVAL)
        assert commit.flushed == 0 and commit.flush_count == 0
        commit.stop()  # returns although the disk never recovered
    finally:
        os.close(read_end)
        os.close(write_end)


def test_stop_flushes_what_was_published(eventfd: int, files: Callable[[int], int]) -> None:
    commit = _commit_thread(eventfd)
    commit.add_file(files(0), 0, FILE)
    commit.delay_us = 100_000  # a slow disk
    assert commit.delay_us == 100_000
    commit.start()
    commit.publish(10)
    time.sleep(0.02)  # inside the first (slow) flush
    commit.publish(20)
    commit.stop()
    assert commit.flushed == 20


def test_waiters_wake_when_their_offset_is_flushed(eventfd: int, files: Callable[[int], int]) -> None:
    commit = _commit_thread(eventfd)
    commit.add_file(files(0), 0, FILE)
    done: dict[int, bool] = {}
    waiters = [threading.Thread(target=lambda n=n: done.__setitem__(n, commit.wait_flushed(n, 5.0)))
               for n in (10, 20, 30)]
    for w in waiters:
        w.start()
    commit.start()
    try:
        commit.publish(15)
        assert _until(lambda: 10 in done)
        time.sleep(0.05)
        assert done == {10: True}  # the others still wait: their bytes are not durable
        commit.publish(30)
        for w in waiters:
            w.join(5)
        assert done == {10: True, 20: True, 30: True}
        assert commit.wait_flushed(30, 0.0)  # already durable: at once
        started = time.monotonic()
        assert not commit.wait_flushed(31, 0.05)  # never published: times out
        assert 0.04 < time.monotonic() - started < 1.0
    finally:
        commit.stop()
    assert not commit.wait_flushed(31, 5.0)  # the thread ended: no waiting for it


def test_a_deferred_publish_is_flushed_by_its_caller_or_a_kick(eventfd: int, files: Callable[[int], int]) -> None:
    """An event loop's puts: publish_deferred wakes nobody; flush_published makes them durable
    on the calling thread before it returns, telling every eventfd but the caller's; kick hands
    what is left to the thread."""
    other = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        commit = _commit_thread(eventfd)
        commit.set_notify_fds([eventfd, other])
        commit.add_file(files(0), 0, FILE)
        commit.start()
        try:
            commit.publish(10)  # once flushed, the thread waits (under its lock until then)
            assert _until(lambda: commit.flushed == 10)
            commit.take_flushes()
            assert _announced(eventfd) >= 1 and _announced(other) >= 1
            commit.publish_deferred(100)
            time.sleep(0.1)
            assert commit.flushed == 10 and commit.flush_count == 1  # the thread was not woken
            assert commit.flush_published(eventfd) >= 0
            assert commit.flushed == 100 and commit.flush_count == 2  # durable when it returns
            assert [b for _, b in commit.take_flushes()] == [90]
            assert _announced(eventfd, timeout_s=0.1) == 0 and _announced(other) >= 1
            assert commit.flush_published(eventfd) == 0 and commit.flush_count == 2  # nothing left

            commit.publish_deferred(200)
            commit.kick()
            assert _announced(eventfd) >= 1 and commit.flushed == 200  # the thread flushed it
        finally:
            commit.stop()
    finally:
        os.close(other)


def test_an_inline_flush_crosses_a_roll_and_reports_a_failure(eventfd: int, files: Callable[[int], int]) -> None:
    commit = _commit_thread(eventfd)
    commit.add_file(files(0), 0, FILE)
    commit.add_file(files(FILE), FILE, 2 * FILE)
    read_end, write_end = os.pipe()  # fdatasync of a pipe fails with EINVAL
    commit.add_file(write_end, 2 * FILE, 3 * FILE)
    commit.start()
    try:
        commit.publish_deferred(FILE + 300)
        assert commit.flush_published() >= 0
        assert commit.flushed == FILE + 300
        assert [b for _, b in commit.take_flushes()] == [FILE, 300]  # one fdatasync per file

        commit.publish_deferred(2 * FILE + 10)
        assert commit.flush_published() == -errno.EINVAL
        assert commit.flushed == 2 * FILE and commit.error == errno.EINVAL  # the third file failed
    finally:
        commit.stop()
        os.close(read_end)
        os.close(write_end)
