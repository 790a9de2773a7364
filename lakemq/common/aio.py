"""asyncio helpers the networking core shares.

Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives in the same turn of the
loop as its inner awaitable finishes (it returns the result instead of raising; CPython
gh-86296, fixed in 3.12): a periodic task woken by an event just as its owner cancels it keeps
running, and the owner awaiting it waits forever. ``asyncio.timeout`` awaits in the caller's
own task and has no such window, so the core waits with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Work left running by a cancelled run_to_end caller: the loop holds tasks only weakly.
_FINISHING: set[asyncio.Task[Any]] = set()


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True if it was set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has ended. Unlike awaiting it under
    ``suppress(CancelledError)``, a cancellation of the caller itself still propagates."""
    task.cancel()
    await asyncio.wait([task])


async def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` in a task of its own that a cancellation of the caller does not stop:
    the caller stops waiting and the work still finishes. Shutdowns run this way, since one
    cut short leaves a client registered with its brokers (its heartbeats keep it in a group
    it has left, holding half the group's queues)."""
    task = asyncio.ensure_future(work)
    _FINISHING.add(task)
    task.add_done_callback(_FINISHING.discard)
    return await asyncio.shield(task)
