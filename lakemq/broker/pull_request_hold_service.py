"""Long polling: a pull that finds nothing waits here until a message arrives or it times out
(RocketMQ PullRequestHoldService).

A held pull is a callback waiting in :meth:`PullRequestHoldService.hold_then` (or a coroutine
awaiting :meth:`PullRequestHoldService.hold`): no task per pull. The store reports
each dispatched batch of messages through :meth:`notify_messages_arriving` (from any thread:
the loop's own when it dispatched its puts itself, else the reput thread), which wakes the pulls of their queues whose offset a message reaches and whose
filter accepts its tags code. The pull processor then runs the pull again and answers. A periodic check
against the queue's max offset is the safety net for a notification that found no waiter.
A held pull whose connection closes is released at once (:meth:`release_connection`): its
answer has nowhere to go, and holding it would keep the request, its filter and the connection
alive until the timeout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lakemq.common.aio import cancel_and_wait
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.dispatch import Arrival
from lakemq.store.filter import MessageFilter

__all__ = ["PullRequestHoldService"]

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _HeldPull:
    key: tuple[str, int]
    pull_from_offset: int
    message_filter: MessageFilter | None
    done: Callable[[bool], None]  # told once: True woken by a message, False timed out or released
    connection: RemotingConnection | None
    timer: asyncio.TimerHandle | None = None


class PullRequestHoldService:
    def __init__(self, max_offset_in_queue: Callable[[str, int], int], check_interval_s: float = 5.0) -> None:
        self._max_offset = max_offset_in_queue
        self._check_interval = check_interval_s
        self._held: dict[tuple[str, int], list[_HeldPull]] = {}
        self._by_connection: dict[RemotingConnection, set[_HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._checker: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Bind to the running loop and start the periodic check."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._checker = self._loop.create_task(self._check_periodically(), name="pull-hold-check")

    async def shutdown(self) -> None:
        """Wake every held pull (they answer with what they have) and stop the check."""
        if self._checker is not None:
            await cancel_and_wait(self._checker)
        for waiters in list(self._held.values()):
            for held in list(waiters):
                self._finish(held, False)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    async def hold(
        self,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        timeout_s: float,
        message_filter: MessageFilter | None = None,
        connection: RemotingConnection | None = None,
    ) -> bool:
        """Wait until the queue holds a message at or after ``pull_from_offset`` that the
        filter may accept; True when woken by one, False on timeout or when ``connection``
        (the puller's) closes."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def done(woken: bool) -> None:
            if not future.done():  # a cancelled waiter
                future.set_result(woken)

        self.hold_then(topic, queue_id, pull_from_offset, timeout_s, message_filter, connection, done)
        return await future

    def hold_then(
        self,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        timeout_s: float,
        message_filter: MessageFilter | None,
        connection: RemotingConnection | None,
        done: Callable[[bool], None],
    ) -> None:
        """:meth:`hold` without a coroutine, on the loop: ``done(woken)`` is called once, on
        the loop (at once when a message is already there or the connection is closed)."""
        key = (topic, queue_id)
        held = _HeldPull(key, pull_from_offset, message_filter, done, connection)
        if connection is not None and not connection.is_open:  # closed while the pull was read
            done(False)
            return
        self._held.setdefault(key, []).append(held)
        if connection is not None:
            self._by_connection.setdefault(connection, set()).add(held)
        # Registered first, then checked, both on the loop: a message dispatched before the
        # check is seen here, one dispatched after it finds this waiter registered.
        if self._max_offset(topic, queue_id) > pull_from_offset:
            self._finish(held, True)
            return
        # A timer per held pull: it answers False at the pull's suspend timeout.
        held.timer = asyncio.get_running_loop().call_later(timeout_s, self._finish, held, False)

    def _finish(self, held: _HeldPull, woken: bool) -> None:
        """Unregister ``held`` and tell its owner, once."""
        waiters = self._held.get(held.key)
        if waiters is None or held not in waiters:
            return  # told already
        waiters.remove(held)
        if not waiters:
            del self._held[held.key]
        if held.timer is not None:
            held.timer.cancel()
        connection = held.connection
        if connection is not None:
            mine = self._by_connection.get(connection)
            if mine is not None:
                mine.discard(held)
                if not mine:
                    del self._by_connection[connection]
        held.done(woken)

    def release_connection(self, connection: RemotingConnection) -> None:
        """The connection closed: its held pulls end now (on the loop)."""
        for held in list(self._by_connection.get(connection, ())):
            self._finish(held, False)
        self._by_connection.pop(connection, None)

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int | None = None
    ) -> None:
        """One message: ``max_offset`` is its queue's offset after it. From any thread."""
        self._notify([(topic, queue_id, max_offset, tags_code)])

    def notify_messages_arriving(self, arrivals: list[Arrival]) -> None:
        """The store's MessageArrivingListener: called on its reput thread once per dispatched
        batch, with every message of the batch that got a ConsumeQueue entry."""
        self._notify(arrivals)

    def _notify(self, arrivals: Sequence[tuple[str, int, int, int | None] | Arrival]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # Most messages find no pull held on their queue: then waking the loop (a pipe write)
        # is wasted. Reading the table from this thread is safe, and no waiter is missed: the
        # queue's max offset already counts these messages, and hold() checks it after
        # registering. The messages that concern a held pull go to the loop in one hand-off.
        held = self._held
        if not held:
            return
        wake = [a[:4] for a in arrivals if (a[0], a[1]) in held]
        if not wake:
            return
        if threading.get_ident() == self._loop_thread:  # dispatched on the loop: no hand-off
            self._wake_each(wake)
            return
        try:
            loop.call_soon_threadsafe(self._wake_each, wake)
        except RuntimeError:  # the loop closed between the check and the call: nobody waits
            pass

    def _wake_each(self, arrivals: list[tuple[str, int, int, int | None]]) -> None:
        for topic, queue_id, max_offset, tags_code in arrivals:
            self._wake(topic, queue_id, max_offset, tags_code)

    def _wake(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None) -> None:
        for held in list(self._held.get((topic, queue_id), ())):
            if max_offset <= held.pull_from_offset:
                continue
            if (
                tags_code is not None
                and held.message_filter is not None
                and not held.message_filter.is_matched_by_consume_queue(tags_code)
            ):
                continue
            self._finish(held, True)

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval)
            for topic, queue_id in list(self._held):
                try:
                    max_offset = self._max_offset(topic, queue_id)
                except Exception:
                    log.exception("max offset of %s:%d failed in the hold check", topic, queue_id)
                    continue
                self._wake(topic, queue_id, max_offset, None)
