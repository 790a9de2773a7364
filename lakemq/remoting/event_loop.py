"""The event loop under every lakemq process: uvloop (libuv) where it is installed, else asyncio's.

uvloop runs the socket reads and writes in C and keeps the GIL across them, so the loop thread
does not hand the GIL to the store's service threads at every send() and wait up to a switch
interval to get it back, which is where a broker on asyncio's selector loop spent most of its
time. It is a dependency (pyproject.toml); the fallback is for platforms it does not support
(Windows) and for ``LAKEMQ_EVENT_LOOP=asyncio``, which compares the two.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop_name", "new_event_loop", "run"]

T = TypeVar("T")

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop has no Windows build
    uvloop = None  # type: ignore[assignment]


def _use_uvloop() -> bool:
    return uvloop is not None and os.environ.get("LAKEMQ_EVENT_LOOP", "uvloop") != "asyncio"


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what :func:`new_event_loop` makes here."""
    return "uvloop" if _use_uvloop() else "asyncio"


def new_event_loop() -> asyncio.AbstractEventLoop:
    if _use_uvloop():
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on :func:`new_event_loop`'s loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
