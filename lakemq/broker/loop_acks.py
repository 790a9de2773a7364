"""Store acknowledgements delivered to an asyncio event loop.

A put that waits for its acknowledgement (SYNC_FLUSH) is answered by the store's PutAcks
(lakemq.store.acks), which owns its deadline: once every condition covers it, or with a
timeout status at its deadline. With an AckWatch (the usual case) the loop itself watches an
eventfd the commit thread writes after each fdatasync and acknowledges on its own thread: no
other thread takes the GIL to hand acknowledgements over. What PutAcks' own thread answers
(deadlines, or everything once the watch is closed) comes in one list per release, handed to
the loop with ONE call_soon_threadsafe. Either way each put's future gets its status, or a
send's :class:`AwaitedReply` makes its answer, and the answers one release makes for a
connection go out in one write (one fdatasync acknowledges several sends of a producer's
connection: redis, too, answers them with one write); no thread parks per put.

Under SYNC_FLUSH the loop also flushes its own puts (GroupCommit.flush_inline): once per turn
in which it appended, after the turn's requests, one fdatasync on the loop, then the loop
acknowledges what it covered. No eventfd and no other thread is involved in the usual case.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.acks import AckSink, AckWatch
from lakemq.store.results import PutMessageStatus

__all__ = ["AwaitedReply", "LoopAcks"]

log = logging.getLogger(__name__)


class AwaitedReply(Protocol):
    """A put's token that answers its request itself once the put's status is known."""

    def reply(self, status: PutMessageStatus) -> tuple[RemotingConnection, RemotingCommand]: ...


class LoopAcks:
    """The store's AckSink for one loop; tokens are futures made by :meth:`future`, or
    :class:`AwaitedReply` objects."""

    __slots__ = ("_ack_watch", "_flush_inline", "_flush_now", "_loop", "_loop_thread")

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 open_ack_watch: Callable[[AckSink], AckWatch | None] | None = None,
                 flush_inline: Callable[[Callable[[], None] | None], bool] | None = None,
                 flush_now: Callable[[int], None] | None = None) -> None:
        """Made on the loop's thread. ``open_ack_watch`` (the store's) opens the watch for
        this sink that the loop watches until :meth:`close`; with it, ``flush_inline`` and
        ``flush_now`` (the store's) make the loop flush its own puts."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._ack_watch = open_ack_watch(self) if open_ack_watch is not None else None
        self._flush_inline = self._flush_now = None
        if self._ack_watch is not None:
            loop.add_reader(self._ack_watch.fd, self._ack_watch.on_readable)
            if flush_inline is not None and flush_now is not None and flush_inline(self._flush_soon):
                self._flush_inline, self._flush_now = flush_inline, flush_now

    def future(self) -> asyncio.Future[PutMessageStatus]:
        return self._loop.create_future()

    def _flush_soon(self) -> None:
        """The store asks for an inline flush: after every callback this turn runs."""
        self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        watch, flush_now = self._ack_watch, self._flush_now
        if watch is None or flush_now is None:  # closed meanwhile: the commit thread has them
            return
        flush_now(watch.fd)
        watch.release()

    def close(self) -> None:
        """Stop watching the store (loop thread). Puts still pending are answered through
        PutAcks' thread, and flushed by the commit thread."""
        if self._flush_inline is not None:
            self._flush_inline(None)
            self._flush_inline = self._flush_now = None
        watch, self._ack_watch = self._ack_watch, None
        if watch is not None:
            self._loop.remove_reader(watch.fd)
            watch.close()

    def __call__(self, acks: list[tuple[Any, PutMessageStatus]]) -> None:
        """Called on the loop's thread (its watch) or PutAcks' thread."""
        if threading.get_ident() == self._loop_thread:
            self._resolve(acks)
            return
        try:
            self._loop.call_soon_threadsafe(self._resolve, acks)
        except RuntimeError:  # the loop is closed: nobody awaits these any more
            pass

    @staticmethod
    def _resolve(acks: list[tuple[asyncio.Future[PutMessageStatus] | AwaitedReply, PutMessageStatus]]) -> None:
        answers: dict[RemotingConnection, list[RemotingCommand]] = {}
        for token, status in acks:
            if isinstance(token, asyncio.Future):
                if not token.done():  # a cancelled waiter (its connection closed)
                    token.set_result(status)
                continue
            try:
                connection, response = token.reply(status)
            except Exception:  # one send's failure must not leave the others unanswered
                log.exception("answering an acknowledged send failed")
                continue
            batch = answers.get(connection)
            if batch is None:
                answers[connection] = [response]
            else:
                batch.append(response)
        for connection, responses in answers.items():
            connection.send_responses(responses)
