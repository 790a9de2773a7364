"""SYNC_MASTER's acknowledgement condition: "a slave has the CommitLog up to offset X".

The store's acknowledgement owner (PutAcks) answers a put once every condition reached the
put's end; under SYNC_MASTER this is one of them, beside the group commit under SYNC_FLUSH.
The store does no networking: the broker's HA service feeds this condition what its slaves
report (:meth:`ReplicaAcks.acknowledged`) and how many are connected
(:meth:`ReplicaAcks.slaves_changed`), and is woken when a put wants to be replicated
(``on_expect``), so it pushes at once.

As RocketMQ's HAService.isSlaveOK: with no slave connected, or one more than
``haSlaveFallbehindMax`` bytes behind the puts, a put is refused SLAVE_NOT_AVAILABLE at once
(it is stored all the same); otherwise it waits until a slave acknowledged its end, else
FLUSH_SLAVE_TIMEOUT. The acknowledged offset is the highest any slave reported and never goes
back (RocketMQ's push2SlaveMaxOffset).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from lakemq.store.results import PutMessageStatus

__all__ = ["ReplicaAcks"]


class ReplicaAcks:
    timeout_status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    may_refuse = True  # no slave connected, or one too far behind: SLAVE_NOT_AVAILABLE

    def __init__(self, fall_behind_max: int, timeout_ms: int) -> None:
        self._fall_behind_max = fall_behind_max
        self.timeout_s: float | None = timeout_ms / 1000  # slaveTimeout: a put waits this long for its slave
        self._acked = 0
        self._slaves = 0
        self._expected = 0  # the furthest end a put asked to be replicated
        self._cond = threading.Condition()
        self._fds: list[int] = []
        # The HA service's wake-up: called for every put (any thread), so it must be quick.
        self.on_expect: Callable[[], None] | None = None

    # -- the acknowledgement owner's side (AckCondition) -------------------------------------

    def expect(self, end: int) -> None:
        self._expected = max(self._expected, end)
        wake = self.on_expect
        if wake is not None:
            wake()

    def advance(self) -> int:
        return self._acked

    def wait(self, end: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._acked >= end or self.refusal() is not None,
                                       timeout_s) and self._acked >= end

    def refusal(self) -> PutMessageStatus | None:
        if self._slaves == 0 or self._expected - self._acked >= self._fall_behind_max:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        return None

    def notify_fds(self, fds: list[int]) -> None:
        with self._cond:
            self._fds = list(fds)

    # -- the HA service's side ---------------------------------------------------------------

    def acknowledged(self, offset: int) -> None:
        """A slave reported having the CommitLog up to ``offset``."""
        with self._cond:
            if offset <= self._acked:
                return
            self._acked = offset
            self._cond.notify_all()
            self._tell()

    def slaves_changed(self, connected: int) -> None:
        """How many slaves are connected now (a refusal may start or end)."""
        with self._cond:
            if connected == self._slaves:
                return
            self._slaves = connected
            self._cond.notify_all()
            self._tell()

    def _tell(self) -> None:
        """Under the lock: notify_fds never returns while a descriptor it drops is written."""
        for fd in self._fds:
            os.eventfd_write(fd, 1)
