"""asyncio helpers the networking core shares.

Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives in the same turn of the
loop as its inner awaitable finishes (it returns the result instead of raising; CPython
gh-86296, fixed in 3.12): a periodic task woken by an event just as its owner cancels it keeps
running, and the owner awaiting it waits forever. ``asyncio.timeout`` awaits in the caller's
own task and has no such window, so the core waits with it.
"""

from __future__ import annotations

import asyncio
from typing import Any


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
