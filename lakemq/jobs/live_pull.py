"""Pipelined pulls of one queue range for the ``lakemq`` source's read tasks.

A broker answers a pull with at most ``maxTransferCountOnMessageInMemory`` messages (32 by
default, as RocketMQ's), so a queue range is many pulls. Asked one after another, each waits
for the previous answer's round trip and for the broker's turn; here up to ``WINDOW`` pulls are
in flight at once, at the offsets the previous answers predict (the next asked offset is the
last one's plus the message count a full answer held). The answers are taken in order and form
a chain: each one's ``next_begin_offset`` is where the next one was asked. Where an answer
breaks the chain (fewer messages than predicted, a filter that skipped offsets, a status other
than FOUND) the answers to the pulls behind it are dropped and the caller goes on from that
answer, so no offset is read twice and none is skipped, whatever the broker answers.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from typing import Any

from lakemq.client.client_api import RawPullResult
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.results import PullStatus
from lakemq.common.message_queue import MessageQueue

__all__ = ["CHUNK_BYTES", "PULL_BATCH", "WINDOW", "Chain", "pull_chain"]

PULL_BATCH = 256  # messages asked per pull; the broker may answer fewer (its maxTransferCount caps)
WINDOW = 8  # pulls in flight at once on one queue
CHUNK_BYTES = 4 << 20  # answers gathered before the caller decodes them in one go

Chain = list[tuple[int, RawPullResult]]  # (asked offset, answer), each answer's next offset the next one asked


async def pull_chain(consumer: PullConsumer, mq: MessageQueue, subscription: str, offset: int, end: int,
                     stride: int) -> Chain:
    """Pulls of ``mq`` from ``offset`` towards ``end`` until about CHUNK_BYTES were answered, the
    range is done or the chain breaks: (asked offset, answer) pairs, each answer's
    ``next_begin_offset`` the next pair's asked offset. ``stride`` is how many messages a full
    answer held so far (0: not known yet, one pull at a time)."""
    window = WINDOW if stride > 0 else 1
    ahead: deque[tuple[int, asyncio.Task[RawPullResult]]] = deque()
    ask = offset

    def launch() -> None:
        nonlocal ask
        while len(ahead) < window and ask < end:
            pull: Coroutine[Any, Any, RawPullResult] = consumer.pull_raw(mq, subscription, ask,
                                                                        min(PULL_BATCH, end - ask))
            ahead.append((ask, asyncio.ensure_future(pull)))
            ask += max(stride, 1)

    chain: Chain = []
    size, broken = 0, False
    try:
        launch()
        while ahead:
            asked, task = ahead.popleft()
            raw = await task
            if broken:
                continue  # asked at a predicted offset the chain did not reach: dropped
            chain.append((asked, raw))
            size += len(raw.body)
            follows = ahead[0][0] if ahead else ask
            if raw.status is not PullStatus.FOUND or raw.next_begin_offset != follows:
                broken = True
            elif size < CHUNK_BYTES:
                launch()
    finally:
        # Answered, not cancelled: a cancelled pull's answer would arrive for a forgotten request.
        await asyncio.gather(*(task for _, task in ahead), return_exceptions=True)
    return chain
