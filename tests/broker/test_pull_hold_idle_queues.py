"""Arrival notices for queues nobody is held on do not wake the event loop, and skipping
them loses no waiter: one registering after the notice sees the message in the max offset."""

from __future__ import annotations

import asyncio
import threading
import time

from lakemq.broker.pull_request_hold_service import PullRequestHoldService


def test_notices_for_unwatched_queues_schedule_nothing_and_lose_no_waiter() -> None:
    max_offsets = {("T", 0): 5}

    async def main() -> tuple[int, bool, bool, float]:
        svc = PullRequestHoldService(lambda t, q: max_offsets[(t, q)], check_interval_s=60)
        svc.start()
        loop = asyncio.get_running_loop()
        scheduled = 0
        original = loop.call_soon_threadsafe

        def counting(*args: object, **kwargs: object) -> asyncio.Handle:
            nonlocal scheduled
            scheduled += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]

        def arrive(offset: int) -> None:  # what the reput thread does: queue first, then notice
            max_offsets[("T", 0)] = offset
            svc.notify_message_arriving("T", 0, offset)

        thread = threading.Thread(target=arrive, args=(6,))
        thread.start()
        thread.join()
        idle_wakes = scheduled
        # Registering after a skipped notice: the max offset already shows the message.
        after_skip = await asyncio.wait_for(svc.hold("T", 0, 5, timeout_s=5), 2)
        started = time.monotonic()
        held = asyncio.create_task(svc.hold("T", 0, 6, timeout_s=5))
        await asyncio.sleep(0.05)
        threading.Thread(target=arrive, args=(7,)).start()
        woken = await held
        elapsed = time.monotonic() - started
        await svc.shutdown()
        return idle_wakes, after_skip, woken, elapsed

    idle_wakes, after_skip, woken, elapsed = asyncio.run(main())
    assert idle_wakes == 0
    assert after_skip is True
    assert woken is True and elapsed < 1.0
