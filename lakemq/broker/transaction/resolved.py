"""Which transactions are already resolved, by origin offset (see half_message).

The half queue may hold several copies of one transaction (one per check-back), and an
END_TRANSACTION may name any of them: the late answer to the first send, or answers to two
check-backs. Claiming the origin before committing makes only the first of them put the real
message, so a committed message is never stored twice. The table is bounded (oldest entries
go first) and filled from END_TRANSACTION and from the Op messages the check service reads,
including, after a restart, the Op messages just before the persisted op offset. A second END
for one transaction comes while check-backs of it may still be answered, so an entry is kept
for the check service's horizon after it was recorded (``forget_before``) and the table holds
only that window, up to its capacity, rather than growing to the capacity. Where the
broker itself resolved a transaction it also remembers the outcome (commit or rollback); an Op
message alone does not say which, so those read back from the op queue have no known outcome.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Final

__all__ = ["DEFAULT_CAPACITY", "ResolvedTransactions"]

DEFAULT_CAPACITY: Final = 100_000


class ResolvedTransactions:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        # origin -> (committed, monotonic time recorded), oldest record first
        self._resolved: OrderedDict[int, tuple[bool | None, float]] = OrderedDict()
        self._in_progress: set[int] = set()

    def is_resolved(self, origin: int) -> bool:
        with self._lock:
            return origin in self._resolved

    def outcome(self, origin: int) -> bool | None:
        """True: committed here, False: rolled back here, None: not resolved or not known how."""
        with self._lock:
            entry = self._resolved.get(origin)
            return entry[0] if entry is not None else None

    def is_in_progress(self, origin: int) -> bool:
        """An END_TRANSACTION is putting it right now (and may yet fail)."""
        with self._lock:
            return origin in self._in_progress

    def claim(self, origin: int) -> bool:
        """True when the caller may resolve ``origin`` (no one has, no one is doing it)."""
        with self._lock:
            if origin in self._resolved or origin in self._in_progress:
                return False
            self._in_progress.add(origin)
            return True

    def settle(self, origin: int, *, resolved: bool, commit: bool | None = None) -> None:
        """End a claim: record the resolution (and how), or give the claim back after a failed put."""
        with self._lock:
            self._in_progress.discard(origin)
            if resolved:
                self._add(origin, commit)

    def add(self, origin: int) -> None:
        with self._lock:
            self._add(origin, None)

    def forget_before(self, age_s: float) -> int:
        """Drop the entries recorded more than ``age_s`` seconds ago; returns how many."""
        horizon = time.monotonic() - age_s
        dropped = 0
        with self._lock:
            while self._resolved:
                origin, (_, recorded) = next(iter(self._resolved.items()))
                if recorded >= horizon:
                    break
                del self._resolved[origin]
                dropped += 1
        return dropped

    def _add(self, origin: int, commit: bool | None) -> None:
        known = self._resolved.get(origin)
        self._resolved[origin] = (known[0] if known is not None and commit is None else commit,
                                  time.monotonic())
        self._resolved.move_to_end(origin)
        while len(self._resolved) > self._capacity:
            self._resolved.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._resolved)
