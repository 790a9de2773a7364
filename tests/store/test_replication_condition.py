"""SYNC_MASTER's acknowledgement condition on its own: refusals (no slave, one too far
behind), waits woken by a slave's report, and the eventfds that tell the acknowledgement
owner it moved."""

from __future__ import annotations

import os
import select
import threading
import time

from lakemq.store.replication import ReplicaAcks
from lakemq.store.results import PutMessageStatus

NOT_AVAILABLE = PutMessageStatus.SLAVE_NOT_AVAILABLE


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_no_slave_or_one_too_far_behind_is_refused_at_once() -> None:
    acks = ReplicaAcks(fall_behind_max=1000, timeout_ms=3000)
    acks.expect(100)
    assert acks.refusal() is NOT_AVAILABLE
    started = time.monotonic()
    assert not acks.wait(100, 5.0) and time.monotonic() - started < 0.5  # refused, not waited out
    acks.slaves_changed(1)
    assert acks.refusal() is None
    acks.expect(999)
    assert acks.refusal() is None
    acks.expect(1000)  # 1000 bytes the slave lacks: haSlaveFallbehindMax reached
    assert acks.refusal() is NOT_AVAILABLE
    acks.acknowledged(500)
    assert acks.refusal() is None and acks.advance() == 500
    acks.acknowledged(400)  # an older report: the highest stays
    assert acks.advance() == 500
    assert acks.timeout_status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and acks.timeout_s == 3.0


def test_a_wait_ends_with_the_slaves_report_or_its_timeout() -> None:
    acks = ReplicaAcks(fall_behind_max=1 << 20, timeout_ms=3000)
    acks.slaves_changed(1)
    acks.expect(200)
    started = time.monotonic()
    assert not acks.wait(200, 0.1) and 0.09 < time.monotonic() - started < 1.0
    threading.Timer(0.1, acks.acknowledged, (250,)).start()
    assert acks.wait(200, 5.0)
    threading.Timer(0.1, acks.slaves_changed, (0,)).start()
    assert not acks.wait(300, 5.0)  # the slave went away: refused, not waited for


def test_moves_are_told_on_the_eventfds_and_puts_wake_the_transfer() -> None:
    woken: list[int] = []
    acks = ReplicaAcks(fall_behind_max=1 << 20, timeout_ms=3000)
    acks.on_expect = lambda: woken.append(1)
    fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    try:
        acks.notify_fds([fd])
        acks.slaves_changed(1)
        assert _readable(fd)
        os.eventfd_read(fd)
        acks.acknowledged(10)
        assert _readable(fd)
        os.eventfd_read(fd)
        acks.acknowledged(10)  # no move, no word
        assert not _readable(fd)
        acks.notify_fds([])
        acks.acknowledged(20)
        assert not _readable(fd)
        acks.expect(30)
        acks.expect(40)
        assert woken == [1, 1]
    finally:
        os.close(fd)
