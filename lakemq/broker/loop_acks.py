"""Group-commit acknowledgements delivered to an asyncio event loop.

Under SYNC_FLUSH the store tells a sink, once per fdatasync, every put of that sink it
covered. With a FlushWatch (the usual case) the loop itself watches an eventfd the commit
thread writes after each fdatasync and acknowledges on its own thread: no other thread takes
the GIL to hand acknowledgements over. Without one, the group-commit thread hands the whole
list to the loop with ONE call_soon_threadsafe. Either way each put's future gets its
status; no thread parks per put.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

from lakemq.store.flush import AckSink, FlushWatch
from lakemq.store.results import PutMessageStatus

__all__ = ["LoopAcks"]


class LoopAcks:
    """The store's AckSink for one loop; tokens are futures made by :meth:`future`."""

    __slots__ = ("_flush_watch", "_loop", "_loop_thread", "_timeout_s", "_timer", "_watched")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float,
                 open_flush_watch: Callable[[AckSink], FlushWatch | None] | None = None) -> None:
        """Made on the loop's thread. ``open_flush_watch`` (the store's) opens the watch
        for this sink that the loop watches until :meth:`close`."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._timeout_s = timeout_s
        self._flush_watch = open_flush_watch(self) if open_flush_watch is not None else None
        if self._flush_watch is not None:
            loop.add_reader(self._flush_watch.fd, self._flush_watch.on_readable)
        # (deadline, future) in deadline order: one timeout for all, so appending keeps it sorted.
        self._watched: collections.deque[tuple[float, asyncio.Future[PutMessageStatus]]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def future(self) -> asyncio.Future[PutMessageStatus]:
        return self._loop.create_future()

    def watch(self, future: asyncio.Future[PutMessageStatus]) -> None:
        """Complete ``future`` with FLUSH_DISK_TIMEOUT if no acknowledgement came within the
        timeout. The group commit times requests out too, from its own thread; this timer
        keeps the loop's replies on time even when that thread is held up. Loop thread only."""
        deadline = self._loop.time() + self._timeout_s
        self._watched.append((deadline, future))
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._expire)

    def close(self) -> None:
        """Stop watching the store's flushes (loop thread). Puts still pending are answered
        through the group-commit thread."""
        watch, self._flush_watch = self._flush_watch, None
        if watch is not None:
            self._loop.remove_reader(watch.fd)
            watch.close()

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        """Called on the loop's thread (its flush watch) or the group-commit thread."""
        if threading.get_ident() == self._loop_thread:
            self._resolve(acks)
            return
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
