"""SYNC_FLUSH acknowledgements through a batching sink (CommitLog.put with a sink): every
acknowledged put is on disk when acknowledged, a commit answers all its puts in one call,
a slow disk answers FLUSH_DISK_TIMEOUT, and a shutdown answers every waiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType
from lakemq.store.group_commit import GroupCommit
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageResult, PutMessageStatus
from tests.store.store_helpers import make_message

Open = Callable[..., CommitLog]


class RecordingSink:
    """Records every delivery with the flushed position the CommitLog had at that moment."""

    def __init__(self, cl: CommitLog) -> None:
        self._cl = cl
        self._lock = threading.Lock()
        self.calls: list[tuple[int, list[tuple[Any, PutMessageStatus]]]] = []
        self.done = threading.Condition(self._lock)

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        flushed = self._cl.flushed_where  # read first: what was on disk when these were acknowledged
        with self._lock:
            self.calls.append((flushed, acks))
            self.done.notify_all()

    def acked(self) -> dict[Any, tuple[PutMessageStatus, int]]:
        """token -> (status, flushed position at its acknowledgement)."""
        with self._lock:
            return {token: (status, flushed) for flushed, acks in self.calls for token, status in acks}

    def wait_for(self, count: int, timeout_s: float = 10.0) -> None:
        with self._lock:
            assert self.done.wait_for(lambda: sum(len(a) for _, a in self.calls) >= count, timeout_s)


def sync_commit_log(open_commit_log: Open, **config: object) -> CommitLog:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1 << 20, **config)
    cl.recover_normally()
    cl.start()
    return cl


def test_every_acknowledged_put_is_flushed_at_its_acknowledgement(open_commit_log: Open) -> None:
    cl = sync_commit_log(open_commit_log)
    sink = RecordingSink(cl)
    results: dict[int, PutMessageResult] = {}
    pending_tokens: set[int] = set()
    lock = threading.Lock()

    def writer(first: int) -> None:
        for i in range(first, first + 100):
            if i % 10 == 9:
                result = cl.put(MessagesPut.of(*[make_message(body=b"b" * 100) for _ in range(3)]), sink, i)
            else:
                result = cl.put(MessagesPut.of(make_message(body=b"s" * 300)), sink, i)
            with lock:
                results[i] = result
                if result.pending:
                    pending_tokens.add(i)

    threads = [threading.Thread(target=writer, args=(n * 1000,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.wait_for(len(pending_tokens))
    acked = sink.acked()
    assert set(acked) == pending_tokens  # exactly the pending puts, each once
    assert sum(len(a) for _, a in sink.calls) == len(pending_tokens)
    assert all(r.status is PutMessageStatus.PUT_OK for r in results.values())
    for token, (status, flushed_at_ack) in acked.items():
        end = results[token].append_result.next_offset  # type: ignore[union-attr]
        assert status is PutMessageStatus.PUT_OK
        assert flushed_at_ack >= end, f"put {token} acknowledged before its bytes were flushed"
    # One delivery per commit covers many puts (8 writers, 800 puts).
    assert len(sink.calls) < len(pending_tokens)
    service = cl.flush_service
    assert isinstance(service, GroupCommit) and len(sink.calls) <= service.flush_count


def test_a_slow_disk_answers_flush_disk_timeout(open_commit_log: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "300")
    cl = sync_commit_log(open_commit_log, sync_flush_timeout=50)  # its commit thread starts slow
    sink = RecordingSink(cl)
    started = time.monotonic()
    first = cl.put(MessagesPut.of(make_message(body=b"1")), sink, 1)
    second = cl.put(MessagesPut.of(make_message(body=b"2")), sink, 2)
    assert first.pending and second.pending
    late = cl.put(MessagesPut.of(make_message(body=b"3")))  # a blocking put: the same deadline
    sink.wait_for(2)
    # Answered at the deadline, not when the stuck fdatasync returns (as RocketMQ's
    # waitForFlush): nothing covered them within 50 ms.
    assert time.monotonic() - started < 0.25
    acked = sink.acked()
    assert acked[1][0] is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert acked[2][0] is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert acked[2][1] < second.append_result.next_offset  # type: ignore[union-attr]
    assert late.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and late.append_result is not None
    assert first.status is PutMessageStatus.PUT_OK  # the append itself succeeded
    # The slow flush still makes the first durable; later flushes the rest.
    deadline = time.monotonic() + 5
    while cl.flushed_where < late.append_result.next_offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cl.flushed_where >= late.append_result.next_offset


def test_shutdown_answers_every_waiter(open_commit_log: Open, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "100")
    cl = sync_commit_log(open_commit_log, sync_flush_timeout=10_000)
    sink = RecordingSink(cl)
    tokens = set()
    for i in range(20):
        result = cl.put(MessagesPut.of(make_message(body=b"w" * 64)), sink, i)
        assert result.status is PutMessageStatus.PUT_OK
        if result.pending:
            tokens.add(i)
    assert tokens and len(sink.acked()) < len(tokens)  # waiters are pending at shutdown
    cl.shutdown()  # a last flush, then every waiter is answered
    acked = sink.acked()
    assert set(acked) == tokens
    assert all(status is PutMessageStatus.PUT_OK for status, _ in acked.values())
    # Registering after the last release gets an answer at once.
    assert cl.acks is not None
    assert cl.acks.register(1 << 40, True, sink, "late") is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert "late" not in sink.acked()
