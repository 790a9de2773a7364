"""PutAcks' state table (lakemq/store/acks.py, docs/SYNC_FLUSH.md) with the real group commit
and a second condition, as replication adds one (lakemq/store/replication.py): a put is
answered PUT_OK once both hold, else once each has held or failed, with the last failed
condition's refusal or timeout status, by the deadlines PutAcks keeps (each condition's own,
else PutAcks'), for sink puts and blocking puts alike."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakemq.store.acks import PutAcks
from lakemq.store.group_commit import GroupCommit
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import PutMessageStatus

OK, DISK, SLAVE, NO_SLAVE = (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                             PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)


class SlaveOffset:
    """The second condition: the offset a slave acknowledged, moved by the test as a slave's
    reports would move it (the AckCondition protocol, as SYNC_MASTER replication implements it)."""

    timeout_status = SLAVE
    may_refuse = True

    def __init__(self, timeout_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Condition()
        self._acked = 0
        self._fds: list[int] = []
        self.connected = True

    def report(self, offset: int) -> None:
        with self._lock:
            self._acked = max(self._acked, offset)
            self._lock.notify_all()
            for fd in self._fds:
                os.eventfd_write(fd, 1)

    def expect(self, end: int) -> None:
        pass

    def advance(self) -> int:
        with self._lock:
            return self._acked

    def wait(self, end: int, timeout_s: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self._acked >= end, timeout_s)

    def refusal(self) -> PutMessageStatus | None:
        return None if self.connected else NO_SLAVE

    def notify_fds(self, fds: list[int]) -> None:
        with self._lock:
            self._fds = list(fds)


class Sink:
    def __init__(self) -> None:
        self._done = threading.Condition()
        self.acks: dict[Any, PutMessageStatus] = {}

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        with self._done:
            self.acks.update(acks)
            self._done.notify_all()

    def answer(self, token: Any, timeout_s: float = 5.0) -> PutMessageStatus:
        with self._done:
            assert self._done.wait_for(lambda: token in self.acks, timeout_s), f"{token} not answered"
        return self.acks[token]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[MappedFileQueue, SlaveOffset, PutAcks]]:
    queue = MappedFileQueue(tmp_path, 1 << 16)
    group_commit, slave = GroupCommit(queue), SlaveOffset()
    acks = PutAcks(300, [group_commit, slave])
    group_commit.start()
    acks.start()
    yield queue, slave, acks
    group_commit.shutdown()
    acks.shutdown()
    queue.shutdown()


def _append(queue: MappedFileQueue, size: int) -> int:
    mf = queue.get_last_mapped_file()
    assert mf is not None
    mf.append(b"x" * size)
    return queue.get_max_offset()


def test_a_put_waits_for_every_condition(parts: tuple[MappedFileQueue, SlaveOffset, PutAcks]) -> None:
    queue, slave, acks = parts
    sink = Sink()
    end = _append(queue, 100)
    assert acks.register(end, True, sink, "a") is None
    slave.report(end)
    assert sink.answer("a") is OK
    assert queue.flushed_where >= end
    assert acks.register(end, True, sink, "again") is OK  # both already hold: answered at once
    assert acks.register(_append(queue, 10), False, sink, "no wait") is OK


def test_the_failed_condition_names_the_timeout(parts: tuple[MappedFileQueue, SlaveOffset, PutAcks]) -> None:
    queue, _slave, acks = parts
    sink = Sink()
    end = _append(queue, 100)
    started = time.monotonic()
    assert acks.register(end, True, sink, "slave late") is None
    assert sink.answer("slave late") is SLAVE  # flushed, but the slave never acknowledged
    assert 0.25 <= time.monotonic() - started < 2.0  # at the deadline (300 ms), not before
    assert queue.flushed_where >= end
    assert acks.wait(end, True) is SLAVE  # a blocking put: the same deadline, the same answer


def test_a_refusing_condition_answers_at_once(parts: tuple[MappedFileQueue, SlaveOffset, PutAcks]) -> None:
    queue, slave, acks = parts
    sink = Sink()
    slave.connected = False
    end = _append(queue, 100)
    started = time.monotonic()
    assert acks.register(end, True, sink, "no slave") is None  # the disk has not covered it yet
    assert sink.answer("no slave") is NO_SLAVE
    assert time.monotonic() - started < 0.25  # at the flush's release, before the deadline
    assert acks.register(end, True, sink, "flushed") is NO_SLAVE  # nothing else to wait for: at register
    assert acks.wait(end, True) is NO_SLAVE
    slave.connected = True
    slave.report(end)
    assert acks.wait(end, True) is OK


def test_the_last_release_answers_every_waiter(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1 << 16)
    group_commit, slave = GroupCommit(queue), SlaveOffset()
    acks = PutAcks(60_000, [group_commit, slave])
    group_commit.start()
    acks.start()
    sink = Sink()
    first = _append(queue, 100)
    assert acks.register(first, True, sink, "replicated") is None
    slave.report(first)
    assert sink.answer("replicated") is OK
    second = _append(queue, 100)
    assert acks.register(second, True, sink, "pending") is None
    group_commit.shutdown()
    acks.shutdown()
    assert sink.answer("pending", 0) is SLAVE  # flushed by the last flush, never replicated
    assert acks.register(second, True, sink, "late") is SLAVE  # after the last release: at once
    queue.shutdown()


def test_each_condition_keeps_its_own_deadline_and_the_later_failure_names_the_answer(tmp_path: Path) -> None:
    """slaveTimeout beside syncFlushTimeout, as RocketMQ: a put the disk never covers and the
    slave never acknowledges is answered once both deadlines passed, with the slave's status
    (RocketMQ's combination puts the replica's over the flush's)."""
    queue = MappedFileQueue(tmp_path, 1 << 16)
    group_commit, slave = GroupCommit(queue), SlaveOffset(timeout_s=0.2)
    acks = PutAcks(600, [group_commit, slave])  # the group commit is never started: no flush
    acks.start()
    try:
        sink = Sink()
        end = _append(queue, 100)
        started = time.monotonic()
        assert acks.register(end, True, sink, "neither") is None
        assert sink.answer("neither") is SLAVE
        assert 0.55 <= time.monotonic() - started < 2.0  # the disk's 600 ms, not the slave's 200
        slave.report(end)
        started = time.monotonic()
        assert acks.register(end, True, sink, "slave only") is None
        assert sink.answer("slave only") is DISK
        assert 0.55 <= time.monotonic() - started < 2.0
        started = time.monotonic()
        assert acks.wait(_append(queue, 10), True) is SLAVE  # blocking: the same deadlines and answer
        assert 0.55 <= time.monotonic() - started < 2.0
    finally:
        acks.shutdown()
        queue.shutdown()
