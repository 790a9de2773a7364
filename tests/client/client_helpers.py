"""Shared bits of the client integration tests."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from lakemq.client import ClientConfig

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000) % 10_000_000}_{next(_names)}"


def client_config(namesrv: str, instance: str) -> ClientConfig:
    # Fast rebalance and offset persistence so tests converge in seconds, not RocketMQ's 20 s.
    return ClientConfig(namesrv_addr=namesrv, instance_name=instance, rebalance_interval=1000,
                        persist_consumer_offset_interval=1000)


async def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
