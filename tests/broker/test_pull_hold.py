"""Long polling: held pulls wake on arrival (from another thread), honour filters, time out."""

from __future__ import annotations

import asyncio
import threading
import time

from lakemq.broker.filter import TagMessageFilter
from lakemq.broker.pull_request_hold_service import PullRequestHoldService
from lakemq.common.message import tags_hash_code
from lakemq.filter import parse_subscription


def run(coro):
    return asyncio.run(coro)


def test_woken_by_arrival_from_another_thread() -> None:
    max_offsets = {("T", 0): 5}

    async def main() -> tuple[bool, float]:
        svc = PullRequestHoldService(lambda t, q: max_offsets[(t, q)], check_interval_s=60)
        svc.start()
        started = time.monotonic()

        def arrive() -> None:
            time.sleep(0.2)
            max_offsets[("T", 0)] = 6
            svc.notify_message_arriving("T", 0, 6, tags_hash_code("a"))

        threading.Thread(target=arrive).start()
        woke = await svc.hold("T", 0, 5, timeout_s=10)
        elapsed = time.monotonic() - started
        assert svc.held_count == 0
        await svc.shutdown()
        return woke, elapsed

    woke, elapsed = run(main())
    assert woke is True
    assert 0.15 < elapsed < 1.0


def test_times_out_and_ignores_unmatched_or_old_messages() -> None:
    async def main() -> tuple[bool, float]:
        svc = PullRequestHoldService(lambda t, q: 3, check_interval_s=60)
        svc.start()
        sub_filter = TagMessageFilter(parse_subscription("T", "wanted"))
        started = time.monotonic()
        task = asyncio.create_task(svc.hold("T", 0, 3, timeout_s=0.4, message_filter=sub_filter))
        await asyncio.sleep(0.05)
        svc.notify_message_arriving("T", 0, 4, tags_hash_code("other"))  # filtered out
        svc.notify_message_arriving("T", 0, 3, tags_hash_code("wanted"))  # not past the offset
        svc.notify_message_arriving("T", 1, 9, tags_hash_code("wanted"))  # another queue
        woke = await task
        await svc.shutdown()
        return woke, time.monotonic() - started

    woke, elapsed = run(main())
    assert woke is False
    assert 0.35 < elapsed < 1.5


def test_message_already_there_answers_at_once_and_check_catches_missed_notify() -> None:
    state = {"max": 8}

    async def main() -> tuple[bool, bool, float]:
        svc = PullRequestHoldService(lambda t, q: state["max"], check_interval_s=0.1)
        svc.start()
        immediate = await svc.hold("T", 0, 7, timeout_s=5)
        started = time.monotonic()
        task = asyncio.create_task(svc.hold("T", 0, 8, timeout_s=5))
        await asyncio.sleep(0.05)
        state["max"] = 9  # dispatched, but no notification: the periodic check must notice
        late = await task
        elapsed = time.monotonic() - started
        await svc.shutdown()
        return immediate, late, elapsed

    immediate, late, elapsed = run(main())
    assert immediate is True and late is True
    assert elapsed < 1.0


def test_a_batch_of_arrivals_wakes_only_held_queues_in_one_hand_off() -> None:
    """The reput's batch goes to the loop once, with just the arrivals of queues that hold a
    pull; each held pull then sees the arrivals its offset and filter accept."""
    async def main() -> tuple[list[bool], list[int]]:
        svc = PullRequestHoldService(lambda t, q: 3, check_interval_s=60)
        svc.start()
        loop = asyncio.get_running_loop()
        handed: list[int] = []
        original = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            handed.append(len(args[0]) if args else 0)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        wanted = TagMessageFilter(parse_subscription("T", "wanted"))
        tasks = [asyncio.create_task(svc.hold("T", 0, 3, timeout_s=0.5, message_filter=wanted)),
                 asyncio.create_task(svc.hold("T", 1, 3, timeout_s=0.5))]
        await asyncio.sleep(0.05)
        arrivals = [("T", 0, 4, tags_hash_code("other"), 1), ("T", 2, 9, 0, 1), ("U", 0, 9, 0, 1),
                    ("T", 0, 5, tags_hash_code("wanted"), 1)]
        threading.Thread(target=svc.notify_messages_arriving, args=(arrivals,)).start()
        woke = list(await asyncio.gather(*tasks))
        await svc.shutdown()
        return woke, handed

    woke, handed = run(main())
    assert woke == [True, False]  # queue 0 by its wanted message; queue 1 got nothing
    assert handed == [2]  # one hand-off carrying queue 0's two arrivals
