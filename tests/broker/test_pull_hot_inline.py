"""A pull of an existing group reading the CommitLog's recent bytes runs on the event loop: it is
answered while every pull-pool thread is busy. A pull that would create its group (a file write)
still waits for the pool."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.common.record import iter_records
from tests.broker.wire import in_process_broker, pool_held_busy, pull_request, send_request

pytestmark = pytest.mark.timeout(60)


async def test_hot_pull_answers_while_the_pull_pool_is_busy(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        for body in (b"one", b"two"):
            assert (await client.invoke(addr, send_request("Hot", body), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        while store.get_max_offset_in_queue("Hot", 0) < 2:
            await asyncio.sleep(0.01)
        # The group is created by a first pull (through the pool: it writes the group file).
        first = await client.invoke(addr, pull_request("known_group", "Hot", 0, 0), 5.0)
        assert first.code == ResponseCode.SUCCESS
        async with pool_held_busy(controller.pull_pool) as release:
            hot = await client.invoke(addr, pull_request("known_group", "Hot", 0, 0), 5.0)
            assert hot.code == ResponseCode.SUCCESS
            assert [m.body for m in iter_records(hot.body)] == [b"one", b"two"]
            # A new group would be created and persisted: that pull queues behind the busy pool.
            new_group = asyncio.create_task(client.invoke(addr, pull_request("new_group", "Hot", 0, 0), 10.0))
            await asyncio.sleep(0.3)
            assert not new_group.done()
            release.set()
            answered = await asyncio.wait_for(new_group, 10.0)
        assert answered.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_records(answered.body)] == [b"one", b"two"]
