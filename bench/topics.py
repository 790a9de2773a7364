"""Topic set-up the benchmarks share: create a topic and wait until the NameServer routes it,
so the first send of a timed run never meets an unknown topic."""

from __future__ import annotations

import asyncio
import time

from lakemq.client.admin import Admin


async def create_routed_topic(namesrv: str, topic: str, *, queue_nums: int, timeout: float = 30.0) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queue_nums)
        deadline = time.monotonic() + timeout
        while topic not in await admin.list_topics():
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} never appeared")
            await asyncio.sleep(0.1)
