"""A send to a known topic is put on the event loop (no send-pool hop); a topic still to be
created, and under SYNC_FLUSH a store whose appends may wait for writeback (stable pages),
wait for a send-pool thread."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.store import message_store
from tests.broker.wire import in_process_broker, pool_held_busy, send_request

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("flush", "stable_pages", "on_loop"), [
    ("ASYNC_FLUSH", False, True), ("ASYNC_FLUSH", True, True),
    ("SYNC_FLUSH", False, True), ("SYNC_FLUSH", True, False),
])
async def test_send_pool_hop_only_where_a_put_may_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: str, stable_pages: bool, on_loop: bool) -> None:
    # The store's device as the case has it, whatever the test machine's is.
    monkeypatch.setattr(message_store, "appends_may_wait_for_writeback", lambda path: stable_pages)
    async with in_process_broker(tmp_path, flushDiskType=flush) as (controller, client):
        addr = controller.broker_addr
        created = await client.invoke(addr, send_request("Known", b"body"), 5.0)
        assert created.code == ResponseCode.SUCCESS, created.remark
        # Every send-pool thread busy: only a put made on the loop can be answered now.
        async with pool_held_busy(controller.send_pool) as release:
            known = await client.invoke(addr, send_request("Known", b"body"), 5.0)
            new = await client.invoke(addr, send_request("New", b"body"), 5.0)
            # A send queued behind the blocked threads is refused by the queue's fast failure.
            if on_loop:
                assert known.code == ResponseCode.SUCCESS, known.remark
            else:
                assert known.code == ResponseCode.SYSTEM_BUSY
                assert "TIMEOUT_CLEAN_QUEUE" in (known.remark or "")
            assert new.code == ResponseCode.SYSTEM_BUSY  # creating a topic writes its config file: pool only
            release.set()
            assert (await client.invoke(addr, send_request("New", b"body"), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        deadline = time.monotonic() + 5  # dispatch to the ConsumeQueue runs behind the put
        while store.get_max_offset_in_queue("Known", 0) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert store.get_max_offset_in_queue("Known", 0) == (2 if on_loop else 1)
