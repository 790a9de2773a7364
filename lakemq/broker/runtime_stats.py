"""The traffic figures of GET_BROKER_RUNTIME_INFO that mqadmin clusterList / brokerStatus and
consoles read (RocketMQ's StoreStatsService and BrokerStats): messages put and got per second
over the last 10 s, 1 min and 10 min (``putTps`` / ``getTransferedTps``, "tps10 tps60 tps600"),
and the day's totals (``msgPutTotalTodayNow``, ``...TodayMorning`` and ``...YesterdayMorning``:
the totals at the last two local midnights, 0 for a midnight before the broker started).

A task on the broker's loop samples two running totals once a second; reading them costs a sum
over a few thread tallies, nothing on the send or pull path.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import time
from collections.abc import Callable

__all__ = ["RuntimeStats"]

_WINDOWS = (10, 60, 600)


class RuntimeStats:
    def __init__(self, put_total: Callable[[], int], get_total: Callable[[], int], interval_s: float = 1.0) -> None:
        self._put_total = put_total
        self._get_total = get_total
        self._interval = interval_s
        # (monotonic time, puts, gets), one a second for the longest window
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque(
            maxlen=int(max(_WINDOWS) / interval_s) + 2)
        self._day = datetime.date.today()
        self._morning = (0, 0)  # totals at the last local midnight
        self._yesterday_morning = (0, 0)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self._interval)

    def sample(self) -> None:
        now = (time.monotonic(), self._put_total(), self._get_total())
        today = datetime.date.today()
        if today != self._day:  # a midnight passed since the last sample
            self._yesterday_morning, self._morning = self._morning, (now[1], now[2])
            self._day = today
        self._samples.append(now)

    def _tps(self, index: int) -> str:
        if len(self._samples) < 2:
            return " ".join("0.00" for _ in _WINDOWS)
        latest = self._samples[-1]
        rates = []
        for window in _WINDOWS:
            oldest = next((s for s in self._samples if latest[0] - s[0] <= window + self._interval / 2),
                          self._samples[0])
            elapsed = latest[0] - oldest[0]
            rates.append((latest[index] - oldest[index]) / elapsed if elapsed > 0 else 0.0)
        return " ".join(f"{r:.2f}" for r in rates)

    def info(self) -> dict[str, str]:
        puts, gets = self._put_total(), self._get_total()
        return {
            "putTps": self._tps(1),
            "getTransferedTps": self._tps(2),
            "msgPutTotalTodayNow": str(puts),
            "msgGetTotalTodayNow": str(gets),
            "msgPutTotalTodayMorning": str(self._morning[0]),
            "msgGetTotalTodayMorning": str(self._morning[1]),
            "msgPutTotalYesterdayMorning": str(self._yesterday_morning[0]),
            "msgGetTotalYesterdayMorning": str(self._yesterday_morning[1]),
        }
