"""A processor family's business pool: a bounded queue in front of worker threads, with
RocketMQ's broker fast failure.

Store calls that may block (creating a topic's or a DLQ's config file, reading messages) run
in threads, one pool per request family; a SYNC_FLUSH send waits for the group commit on the
event loop, not here (lakemq.broker.loop_acks). Waiting requests sit in a queue owned by the event
loop; a request that waited longer than ``max_wait_ms`` at the head of the queue is answered
SYSTEM_BUSY at once (RocketMQ's waitTimeMillsInSendQueue, checked every 10 ms while requests
wait: an idle pool sets no timer), and a full
queue refuses new work, so a slow disk turns into quick refusals a producer can route around
instead of timeouts. Only the event loop may call :meth:`run`.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from lakemq.common.codes import ResponseCode
from lakemq.errors import ServiceNotAvailableError, SystemBusyError

__all__ = ["BusinessPool"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_CLEAN_INTERVAL_S = 0.01


@dataclass(slots=True, eq=False)
class _Job:
    enqueued: float
    future: asyncio.Future[Any]
    fn: Callable[[], Any]


class BusinessPool:
    def __init__(self, name: str, threads: int, capacity: int, max_wait_ms: int | None = None) -> None:
        self.name = name
        self._threads = threads
        self._capacity = capacity
        self._max_wait_s = None if max_wait_ms is None else max_wait_ms / 1000
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._pending: collections.deque[_Job] = collections.deque()
        self._running = 0
        self._cleaner: asyncio.TimerHandle | None = None  # set while requests wait (max_wait_ms)
        self.rejected = 0

    @property
    def queue_size(self) -> int:
        return len(self._pending)

    @property
    def threads(self) -> int:
        return self._threads

    async def shutdown(self) -> None:
        if self._cleaner is not None:
            self._cleaner.cancel()
            self._cleaner = None
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_exception(
                    ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is shutting down")
                )
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    def head_wait_ms(self) -> int:
        """How long the oldest waiting request has waited (RocketMQ's headSlowTimeMills)."""
        pending = self._pending
        return int((time.monotonic() - pending[0].enqueued) * 1000) if pending else 0

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on a worker thread when one is free; raises SystemBusyError on overload."""
        if len(self._pending) >= self._capacity:
            self.rejected += 1
            raise SystemBusyError(
                ResponseCode.SYSTEM_BUSY,
                f"[OVERLOAD]system busy, start flow control for a while ({self.name} queue full)",
            )
        loop = asyncio.get_running_loop()
        job = _Job(time.monotonic(), loop.create_future(), fn)
        self._pending.append(job)
        self._pump()
        if self._pending and self._cleaner is None and self._max_wait_s is not None:
            self._cleaner = loop.call_later(_CLEAN_INTERVAL_S, self._clean_expired)
        return await job.future  # type: ignore[no-any-return]

    def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        while self._running < self._threads and self._pending:
            job = self._pending.popleft()
            if job.future.done():  # the caller went away (connection closed, cancelled)
                continue
            self._running += 1
            work = loop.run_in_executor(self._executor, job.fn)
            work.add_done_callback(functools.partial(self._finished, job))

    def _finished(self, job: _Job, work: asyncio.Future[Any]) -> None:
        self._running -= 1
        if not job.future.done():
            if work.cancelled():
                job.future.cancel()
            elif work.exception() is not None:
                job.future.set_exception(work.exception())  # type: ignore[arg-type]
            else:
                job.future.set_result(work.result())
        self._pump()

    def _clean_expired(self) -> None:
        """Refuse the requests that waited too long at the head; again in 10 ms while any waits."""
        assert self._max_wait_s is not None
        self._cleaner = None
        now = time.monotonic()
        while self._pending and now - self._pending[0].enqueued > self._max_wait_s:
            job = self._pending.popleft()
            if job.future.done():
                continue
            self.rejected += 1
            waited_ms = int((now - job.enqueued) * 1000)
            job.future.set_exception(
                SystemBusyError(
                    ResponseCode.SYSTEM_BUSY,
                    f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{waited_ms}ms, size of queue: {len(self._pending)}",
                )
            )
        if self._pending:
            self._cleaner = asyncio.get_running_loop().call_later(_CLEAN_INTERVAL_S, self._clean_expired)
