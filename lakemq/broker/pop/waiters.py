"""Held pops (long polling): each waits on its topic's event, set and dropped when a message
arrives in the topic or in a pop retry topic aliased to it (how revived copies announce
themselves), or when a delivery of the topic ends (a FIFO queue may be free).

Events are made and set on the event loop; :meth:`PopWaiters.wake` may be called from any
thread (the store's reput thread, the POP thread): it only tests membership, which the GIL
keeps safe while the loop changes the tables, and hands the hits to the loop in one call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from lakemq.store.dispatch import Arrival

__all__ = ["PopWaiters"]


class PopWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: dict[str, asyncio.Event] = {}
        self._aliases: dict[str, str] = {}  # pop retry topic -> the topic whose pops wait for it

    def event(self, topic: str, retry_topic: str) -> asyncio.Event:
        """What a pop of ``topic`` waits on; taken before it looks, so a change while it looks
        makes it look again."""
        self._aliases[retry_topic] = topic
        return self._events.setdefault(topic, asyncio.Event())

    def wake(self, topics: Iterable[str]) -> None:
        events, aliases = self._events, self._aliases
        hits = {aliases.get(t, t) for t in topics if t in events or t in aliases}
        if hits:
            self._loop.call_soon_threadsafe(self._notify, hits)

    def on_arrivals(self, arrivals: list[Arrival]) -> None:
        """The store's MessageArrivingListener (reput thread)."""
        if self._events:
            self.wake({arrival[0] for arrival in arrivals})

    def _notify(self, topics: set[str]) -> None:
        for topic in topics:
            event = self._events.pop(topic, None)
            if event is not None:
                event.set()
