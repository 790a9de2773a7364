"""Acknowledging puts: the one owner of every put's acknowledgement and its deadline.

A put that must wait before it is answered (WAIT=true, the default) waits for every
*condition* the store has. Each condition is an offset in the CommitLog below which it holds:

- the group commit (lakemq.store.group_commit, SYNC_FLUSH): "flushed locally up to X";
- replication (lakemq.store.replication, SYNC_MASTER): "a slave acknowledged up to X".

A put ending at ``end`` is acknowledged PUT_OK once every condition has reached ``end``. Each
condition has its deadline after the put's registration, kept here and nowhere else: the
condition's own ``timeout_s`` (replication: ``slaveTimeout``), else PutAcks' timeout
(``syncFlushTimeout``), as RocketMQ waits for the disk and for the slave side by side. A put
is answered once every condition has either reached ``end`` or failed it (refused it, or its
deadline passed); a failure of a later condition names the answer over an earlier one's, as
RocketMQ's combination puts the replica's status over the flush's. With no condition
(ASYNC_FLUSH, no SYNC_MASTER) the CommitLog has no PutAcks and every put is answered at its
append.

One put, from its registration (docs/SYNC_FLUSH.md has the same table):

| state   | event                                                   | next    | answer                          |
|---------|---------------------------------------------------------|---------|---------------------------------|
| -       | register, WAIT=false                                    | -       | PUT_OK at once                  |
| -       | register, every condition already reached ``end``       | -       | PUT_OK at once                  |
| -       | register, a condition refuses, every other reached ``end`` | -    | that refusal at once (SLAVE_NOT_AVAILABLE) |
| -       | register after the last release (shutdown)              | -       | PUT_OK if reached, else as at the deadlines, at once |
| -       | register otherwise                                      | WAITING | (later, through the sink)       |
| WAITING | a release finds every condition reached ``end``         | DONE    | PUT_OK                          |
| WAITING | a release finds every condition reached ``end`` or failed it, one failed | DONE | the last failed condition's status: its `refusal` (SLAVE_NOT_AVAILABLE) or, past its deadline, its `timeout_status` (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT) |
| WAITING | the last release (shutdown, after the last flush)       | DONE    | PUT_OK if reached, else as at the deadlines |

Who releases: this service's thread, woken by an eventfd that the conditions write whenever
they move (the commit thread in C after each fdatasync) and at least every 10 ms for the
deadlines; or, for a sink whose owner opened an :class:`AckWatch` (the broker's event loop),
that owner, on its own thread, when the watch's eventfd turns readable. While a watch is
open the conditions write the watches' eventfds instead of this thread's, and this thread
answers the watched sink's puts only at their deadline; every other sink's it answers as soon
as they are covered. A sink receives, once per release, the list of ``(token, status)`` of
its puts that release answered.

A blocking put (no sink: the schedule service, send-back, transactions) waits on each
condition in turn (``AckCondition.wait``; the group commit's waits on its commit thread
without the GIL) with what is left of that condition's deadline, and is answered by the same
rules.

The CommitLog builds the conditions from the configuration (docs/SYNC_FLUSH.md says how).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lakemq.store.results import PutMessageStatus
from lakemq.store.service_thread import ServiceThread

__all__ = ["AckCondition", "AckSink", "AckWatch", "PutAcks"]

log = logging.getLogger(__name__)

# The releasing thread wakes at least this often, so a deadline is kept to within 10 ms.
_POLL_MS = 10

# Takes every acknowledgement one release produced for it at once: (token, status) pairs, on
# this service's thread or a watch's owner, so it must be quick and must not raise (an
# asyncio caller on another thread hands the whole list to its loop with one
# call_soon_threadsafe).
AckSink = Callable[[list[tuple[Any, PutMessageStatus]]], None]
_Request = tuple[int, float, AckSink, Any]  # end offset, registered at (monotonic), sink, token


class AckCondition(Protocol):
    """One condition of every put's acknowledgement: an offset below which it holds."""

    # Answered to a put this condition did not cover by its deadline.
    timeout_status: PutMessageStatus
    # The deadline after a put's registration; None: PutAcks' own (syncFlushTimeout).
    timeout_s: float | None
    # False promises that refusal() is always None (the group commit's): PutAcks then does
    # not ask it at each put.
    may_refuse: bool

    def expect(self, end: int) -> None:
        """A put ending at ``end`` was appended (every put, waiting or not): make the
        condition move there (the group commit publishes ``end`` to its commit thread)."""
        ...

    def advance(self) -> int:
        """Where the condition holds now, taking what moved on the way (the group commit
        moves the CommitLog's flushed position, the checkpoint and the flush metrics). Called
        by whoever releases, serialised by the condition itself."""
        ...

    def wait(self, end: int, timeout_s: float) -> bool:
        """Block until the condition holds at ``end``; False after ``timeout_s``."""
        ...

    def refusal(self) -> PutMessageStatus | None:
        """A status to answer at once to every put not covered yet, or None to let them wait
        for their deadline. The group commit never refuses (a failing fdatasync is retried);
        replication answers SLAVE_NOT_AVAILABLE while no slave is connected."""
        ...

    def notify_fds(self, fds: list[int]) -> None:
        """From now on write a count to each of these eventfds whenever the condition moves;
        a descriptor left out is never written again once this returns."""
        ...


def _silence(conditions: Sequence[AckCondition], fd: int) -> None:
    """An unused PutAcks is dropped: its conditions stop writing its eventfd before it closes."""
    for condition in conditions:
        condition.notify_fds([])
    os.close(fd)


class PutAcks(ServiceThread):
    def __init__(self, timeout_ms: int, conditions: Sequence[AckCondition]) -> None:
        super().__init__("PutAcks")
        self._conditions = tuple(conditions)
        default = timeout_ms / 1000
        self._timeouts = tuple(default if c.timeout_s is None else c.timeout_s for c in self._conditions)
        self._first_timeout = min(self._timeouts, default=default)
        self._expects = tuple(c.expect for c in self._conditions)
        # Asked per put only if some condition may refuse (replication; never the group commit).
        self._may_refuse = any(c.may_refuse for c in self._conditions)
        # SYNC_FLUSH alone: a blocking put waits on that one condition, with nothing to combine.
        self._lone = self._conditions[0] if len(self._conditions) == 1 and not self._may_refuse else None
        self._lock = threading.Lock()  # the requests, `_covered` and `_closed`
        self._requests: list[_Request] = []
        self._covered = -1  # every condition held up to here at the last release
        self._closed = False  # set by the last release: no request is queued after it
        self._watch_lock = threading.Lock()
        self._watches: list[AckWatch] = []
        self._notify_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        weakref.finalize(self, _silence, self._conditions, self._notify_fd).atexit = False
        self._tell_conditions()

    # -- putting ---------------------------------------------------------------------------

    def register(self, end: int, wait: bool, sink: AckSink, token: Any) -> PutMessageStatus | None:
        """A put ending at ``end`` was appended. Its status if known now; otherwise None, and
        ``sink`` later receives ``(token, status)``."""
        for expect in self._expects:
            expect(end)
        if not wait:
            return PutMessageStatus.PUT_OK
        if self._may_refuse and any(refusals := [c.refusal() for c in self._conditions]):
            # Refused now (no slave, as RocketMQ's isSlaveOK at the put): answered at once
            # when every other condition is settled; nothing would wake a release for it.
            refused = self._unmet(end, [c.advance() for c in self._conditions], refusals, 0.0, False)
            if refused is not None:
                return refused
        with self._lock:
            # Under the lock: a release sets _covered and takes the requests in one step, so
            # a request it would not see is answered here.
            if end <= self._covered:
                return PutMessageStatus.PUT_OK
            if not self._closed:
                self._requests.append((end, time.monotonic(), sink, token))
                return None
        return self._status_now(end)

    def wait(self, end: int, wait: bool) -> PutMessageStatus:
        """A put ending at ``end`` was appended: block until it may be answered."""
        lone = self._lone
        if lone is not None and wait and not self._closed:  # SYNC_FLUSH alone: the fewest steps
            lone.expect(end)
            return PutMessageStatus.PUT_OK if lone.wait(end, self._first_timeout) else lone.timeout_status
        for expect in self._expects:
            expect(end)
        if not wait:
            return PutMessageStatus.PUT_OK
        if self._closed:
            return self._status_now(end)
        registered = time.monotonic()
        failed = None  # a later condition's failure names the answer over an earlier one's
        for condition, timeout in zip(self._conditions, self._timeouts, strict=True):
            refusal = condition.refusal()
            if refusal is not None and condition.advance() < end:
                failed = refusal
            elif not condition.wait(end, max(0.0, registered + timeout - time.monotonic())):
                failed = condition.refusal() or condition.timeout_status
        return failed or PutMessageStatus.PUT_OK

    def _status_now(self, end: int) -> PutMessageStatus:
        """After the last release: answered at once, as that release would have."""
        marks = [c.advance() for c in self._conditions]
        refusals = [c.refusal() for c in self._conditions]
        return self._unmet(end, marks, refusals, 0.0, True) or PutMessageStatus.PUT_OK

    # -- watches ---------------------------------------------------------------------------

    def open_watch(self, sink: AckSink) -> AckWatch:
        """For an event loop that acknowledges its own puts (made with ``sink``): an AckWatch
        whose eventfd is readable whenever a condition moved."""
        watch = AckWatch(self, sink)
        with self._watch_lock:
            self._watches.append(watch)
            self._tell_conditions()
        return watch

    def _close_watch(self, watch: AckWatch) -> None:
        with self._watch_lock:
            if watch in self._watches:
                self._watches.remove(watch)
            self._tell_conditions()

    def _tell_conditions(self) -> None:
        fds = [w.fd for w in self._watches] or [self._notify_fd]
        for condition in self._conditions:
            condition.notify_fds(fds)

    # -- releasing -------------------------------------------------------------------------

    def release(self) -> None:
        """Answer what the conditions now cover, on the calling thread (a watch's owner)."""
        self._release(final=False)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop after a last release; the conditions' own last work (the group commit's last
        flush) must be done before, so that release answers PUT_OK to what it covered."""
        self._stop_event.set()
        os.eventfd_write(self._notify_fd, 1)
        super().shutdown(timeout_s)

    def run(self) -> None:
        poller = select.poll()
        poller.register(self._notify_fd, select.POLLIN)
        try:
            while not self.stopped:
                notified = bool(poller.poll(_POLL_MS))
                if notified:
                    try:
                        os.eventfd_read(self._notify_fd)
                    except BlockingIOError:
                        pass
                # A move announced to the watches is theirs to acknowledge for their sinks;
                # one that reached this thread (it raced a watch's opening) is ours.
                self._release(final=False, left_to_watches=not notified)
        finally:
            for watch in list(self._watches):
                watch.close()
            self._release(final=True)

    def _release(self, *, final: bool, left_to_watches: bool = False) -> None:
        """Answer the requests every condition covers or has failed (refused, or past its
        deadline; every request with ``final``); with ``left_to_watches`` a watched sink's
        requests only once the earliest deadline passed."""
        conditions = self._conditions
        marks = [c.advance() for c in conditions]
        covered = min(marks)
        with self._lock:
            self._covered = covered
            if not self._requests and not final:
                return
            requests, self._requests = self._requests, []
            if final:
                self._closed = True
        watched = {w.sink for w in self._watches} if left_to_watches else ()
        refusals = [c.refusal() for c in conditions]
        # No refusal and before the earliest deadline, a request not covered yet still waits:
        # decided here, without _unmet (a release sees every waiting request again).
        waiting = not final and not any(refusals)
        now = time.monotonic()
        ok = PutMessageStatus.PUT_OK
        pending: list[_Request] = []
        by_sink: dict[AckSink, list[tuple[Any, PutMessageStatus]]] = {}
        first_timeout = self._first_timeout
        for request in requests:
            end, registered, sink, token = request
            age = now - registered
            if age < first_timeout and (sink in watched or (waiting and end > covered)):
                pending.append(request)
                continue
            if end <= covered:
                status = ok
            else:
                unmet = self._unmet(end, marks, refusals, age, final)
                if unmet is None:
                    pending.append(request)
                    continue
                status = unmet
            acks = by_sink.get(sink)
            if acks is None:
                by_sink[sink] = [(token, status)]
            else:
                acks.append((token, status))
        if pending:
            with self._lock:
                closed = self._closed
                if not closed:
                    self._requests[:0] = pending
            if closed:  # the last release ran meanwhile (on the service's thread): answer now
                for end, _, sink, token in pending:
                    status = self._unmet(end, marks, refusals, 0.0, True) or ok
                    by_sink.setdefault(sink, []).append((token, status))
        for sink, acks in by_sink.items():
            try:
                sink(acks)
            except Exception:  # one broken caller must not stop acknowledgements for the rest
                log.exception("acknowledging %d put(s) failed", len(acks))

    def _unmet(self, end: int, marks: list[int], refusals: list[PutMessageStatus | None],
               age: float, final: bool) -> PutMessageStatus | None:
        """The status of a put ending at ``end``, registered ``age`` seconds ago, that some
        condition does not cover: None while an uncovered condition may still be waited for
        (and when every condition covers it); else the last uncovered condition's refusal, or
        its timeout status (its deadline passed, or ``final``)."""
        failed = None
        for condition, mark, refusal, timeout in zip(self._conditions, marks, refusals, self._timeouts,
                                                     strict=True):
            if mark >= end:
                continue
            if refusal is not None:
                failed = refusal
            elif final or age >= timeout:
                failed = condition.timeout_status
            else:
                return None
        return failed


class AckWatch:
    """An eventfd readable whenever a condition moved (PutAcks.open_watch): its owner, an
    event loop, calls :meth:`on_readable` when it is, and so acknowledges the puts made with
    ``sink`` on its own thread, with no hand-off from another."""

    def __init__(self, acks: PutAcks, sink: AckSink) -> None:
        self._acks = acks
        self.sink = sink  # the requests its owner acknowledges
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closed = False

    def on_readable(self) -> None:
        if self._closed:
            return
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:  # already read
            return
        self._acks.release()

    def release(self) -> None:
        """Answer what the conditions now cover without waiting for the eventfd: its owner
        made them move itself (an inline flush, GroupCommit.flush_now)."""
        if not self._closed:
            self._acks.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop watching; the service's own thread is told of every move again."""
        if self._closed:
            return
        self._closed = True
        self._acks._close_watch(self)
        os.close(self.fd)
