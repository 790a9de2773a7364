"""Is a message with this UNIQ_KEY stored in this topic? The broker's IndexFile answers
(QUERY_MESSAGE by unique key). Jobs that re-produce messages use it to find out whether a send
that was in flight when an earlier run died reached the broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lakemq.common.message import MessageConst
from lakemq.errors import LakeMQError

__all__ = ["FoundAtBroker", "broker_lookup"]

FoundAtBroker = Callable[[str, str], bool]  # (topic, UNIQ_KEY) -> stored there already


@contextmanager
def broker_lookup(namesrv: str) -> Iterator[FoundAtBroker]:
    """A FoundAtBroker over QUERY_MESSAGE by unique key (a missing topic holds nothing)."""
    from lakemq.client.admin import Admin
    from lakemq.client.sync import background_loop

    loop = background_loop()

    async def make() -> Admin:
        return Admin(namesrv)

    admin = asyncio.run_coroutine_threadsafe(make(), loop).result()

    def found(topic: str, uniq_key: str) -> bool:
        try:
            msgs = asyncio.run_coroutine_threadsafe(
                admin.query_message(topic, uniq_key, max_num=4, unique_key=True), loop
            ).result(60)
        except LakeMQError as exc:
            if "does not exist" in str(exc):
                return False
            raise
        return any(m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == uniq_key for m in msgs)

    try:
        yield found
    finally:
        asyncio.run_coroutine_threadsafe(admin.__aexit__(None, None, None), loop).result(30)
