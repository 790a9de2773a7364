"""Group-commit acknowledgements delivered to an asyncio event loop.

Under SYNC_FLUSH the store's group-commit thread tells a sink, once per fdatasync, every put
of that sink it covered. This sink hands the whole list to the loop with ONE
call_soon_threadsafe (one self-pipe write, one loop wake-up), where each put's future gets
its status: no thread parks per put, and no per-put hand-off between threads.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from lakemq.store.results import PutMessageStatus

__all__ = ["LoopAcks"]


class LoopAcks:
    """The store's AckSink for one loop; tokens are futures made by :meth:`future`."""

    __slots__ = ("_loop", "_timeout_s", "_timer", "_watched")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        # (deadline, future) in deadline order: one timeout for all, so appending keeps it sorted.
        self._watched: collections.deque[tuple[float, asyncio.Future[PutMessageStatus]]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def future(self) -> asyncio.Future[PutMessageStatus]:
        return self._loop.create_future()

    def watch(self, future: asyncio.Future[PutMessageStatus]) -> None:
        """Complete ``future`` with FLUSH_DISK_TIMEOUT if no acknowledgement came within the
        timeout. The group commit times requests out too, but only between two fdatasyncs:
        a disk stuck in one would hold every reply. Loop thread only."""
        deadline = self._loop.time() + self._timeout_s
        self._watched.append((deadline, future))
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._expire)

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        """Called on the group-commit thread."""
        try:
            self._loop.call_soon_threadsafe(self._resolve, acks)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            pass

    def _resolve(self, acks: list[tuple[asyncio.Future[PutMessageStatus], PutMessageStatus]]) -> None:
        for future, status in acks:
            if not future.done():  # a timed-out or cancelled waiter (its connection closed)
                future.set_result(status)
        watched = self._watched
        while watched and watched[0][1].done():  # acknowledged about in order: the head drains
            watched.popleft()

    def _expire(self) -> None:
        self._timer = None
        watched, now = self._watched, self._loop.time()
        while watched:
            deadline, future = watched[0]
            if not future.done():
                if deadline > now:
                    self._timer = self._loop.call_at(deadline, self._expire)
                    return
                future.set_result(PutMessageStatus.FLUSH_DISK_TIMEOUT)
            watched.popleft()
