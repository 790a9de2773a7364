"""A client instance's background duties stop when its last member leaves, whatever they were
doing at that moment."""

from __future__ import annotations

import asyncio

from lakemq.client.client_instance import ClientInstance
from lakemq.client.config import ClientConfig
from lakemq.common.aio import wait_event


async def test_release_stops_a_rebalance_loop_woken_in_the_same_turn() -> None:
    # A broker's NOTIFY_CONSUMER_IDS_CHANGED (Apache RocketMQ sends one as a consumer leaves)
    # wakes the rebalance loop in the very turn its last member releases the instance. Under
    # asyncio.wait_for on Python 3.11 the loop swallowed that cancellation and release() waited
    # for it forever.
    instance = ClientInstance(ClientConfig(namesrv_addr="127.0.0.1:1"))
    await instance.start()
    await asyncio.sleep(0)  # every duty is now waiting
    duties = list(instance._tasks)
    instance.wake_rebalance()
    async with asyncio.timeout(5):
        await instance.release()
    assert duties and all(task.cancelled() for task in duties)


async def test_wait_event_reports_set_or_timed_out_and_passes_cancellation_on() -> None:
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    event.set()
    assert await wait_event(event, 5)

    event.clear()
    waiter = asyncio.create_task(wait_event(event, 60))
    await asyncio.sleep(0)
    event.set()
    waiter.cancel()  # set and cancelled in one turn: the cancellation wins, as it must
    try:
        await waiter
    except asyncio.CancelledError:
        pass
    assert waiter.cancelled()
