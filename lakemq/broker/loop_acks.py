"""Group-commit acknowledgements delivered to an asyncio event loop.

Under SYNC_FLUSH the store's group-commit thread tells a sink, once per fdatasync, every put
of that sink it covered. This sink hands the whole list to the loop with ONE
call_soon_threadsafe (one self-pipe write, one loop wake-up), where each put's future gets
its status: no thread parks per put, and no per-put hand-off between threads.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lakemq.store.results import PutMessageStatus

__all__ = ["LoopAcks"]


class LoopAcks:
    """The store's AckSink for one loop; tokens are futures made by :meth:`future`."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def future(self) -> asyncio.Future[PutMessageStatus]:
        return self._loop.create_future()

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        """Called on the group-commit thread."""
        try:
            self._loop.call_soon_threadsafe(_resolve, acks)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            pass


def _resolve(acks: list[tuple[asyncio.Future[PutMessageStatus], PutMessageStatus]]) -> None:
    for future, status in acks:
        if not future.done():  # a cancelled waiter (its connection closed)
            future.set_result(status)
