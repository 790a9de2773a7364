"""How the store's dispatch tells the HA server of new CommitLog bytes: on the loop's own
thread (a broker that dispatches its puts inline) at once, with no hand-off through the
loop's wake-up descriptor; from another thread handed to the loop, at most one hand-off
pending, even when the loop notifies at once meanwhile."""

from __future__ import annotations

import asyncio
import threading

from lakemq.broker.ha.config import HaConfig
from lakemq.broker.ha.master import HaServer
from lakemq.broker.ha.progress import ReplicationProgress
from lakemq.remoting import event_loop


class _NoLog:
    commit_log_file_size = 1 << 20

    def get_commit_log_data(self, offset: int) -> memoryview | None:
        return None

    def get_max_phy_offset(self) -> int:
        return 0

    def get_min_phy_offset(self) -> int:
        return 0


def test_notify_runs_at_once_on_the_loop_thread_and_once_per_hand_off_from_others() -> None:
    async def scenario() -> tuple[int, int, int]:
        server = HaServer(_NoLog(), HaConfig(), ReplicationProgress(lambda: 0), "127.0.0.1", 0)
        await server.start()
        calls = 0
        real_notify = server.notify

        def counted() -> None:
            nonlocal calls
            calls += 1
            real_notify()

        server.notify = counted  # type: ignore[method-assign]
        try:
            server.notify_threadsafe()
            on_loop = calls  # counted before the loop turned: no call_soon_threadsafe

            def from_other_thread() -> None:
                other = threading.Thread(target=lambda: [server.notify_threadsafe() for _ in range(3)])
                other.start()
                other.join()

            from_other_thread()
            server.notify_threadsafe()  # on the loop while the hand-off waits: at once ...
            from_other_thread()  # ... and the pending hand-off still covers these
            before_turn = calls
            await asyncio.sleep(0.05)
            return on_loop, before_turn, calls
        finally:
            await server.shutdown()

    on_loop, before_turn, after_turn = event_loop.run(scenario())
    assert on_loop == 1
    assert before_turn == 2  # the other thread's six calls wait for the loop ...
    assert after_turn == 3  # ... and run as one hand-off
