"""A held pull woken by an arriving message reads it on the event loop: it is answered even
while every pull-pool thread is busy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.common.record import iter_records
from tests.broker.wire import in_process_broker, pool_held_busy, pull_request, send_request

pytestmark = pytest.mark.timeout(60)


async def test_woken_pull_answers_while_the_pull_pool_is_busy(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        assert (await client.invoke(addr, send_request("Held", b"first"), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        while store.get_max_offset_in_queue("Held", 0) < 1:
            await asyncio.sleep(0.01)
        held_pull = pull_request("cg", "Held", 0, 1, suspend_ms=10_000)
        held = asyncio.create_task(client.invoke(addr, held_pull, 15.0))
        while controller.hold_service is None or controller.hold_service.held_count == 0:
            await asyncio.sleep(0.01)
        async with pool_held_busy(controller.pull_pool):
            second = await client.invoke(addr, send_request("Held", b"second"), 5.0)
            assert second.code == ResponseCode.SUCCESS
            response = await asyncio.wait_for(held, 5.0)
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_records(response.body)] == [b"second"]
