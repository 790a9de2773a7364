"""LoopLagProbe: how late the broker's event loop runs a callback it was asked to run.

A task on the loop sleeps ``interval_s`` and measures how much later than asked it woke: the
time every request, held pull and timer waited behind whatever held the loop (a slow handler,
a long GC pause, a blocking call that slipped onto it). A soak watches it grow; the metrics
scrape reads the worst lag of the last minute and the latest one.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["LoopLagProbe"]

_WINDOW_S = 60.0


class LoopLagProbe(Collector):
    def __init__(self, broker: str, interval_s: float = 0.5) -> None:
        self._broker = broker
        self._interval = interval_s
        # (monotonic time of the wake-up, its lag in seconds), the last minute's
        self._samples: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=int(_WINDOW_S / interval_s) + 2)

    async def run(self) -> None:
        while True:
            asked = time.monotonic() + self._interval
            await asyncio.sleep(self._interval)
            now = time.monotonic()
            self.record(now, max(0.0, now - asked))

    def record(self, now: float, lag_s: float) -> None:
        self._samples.append((now, lag_s))

    def lag(self) -> tuple[float, float]:
        """(latest lag, worst lag over the last minute), in seconds; (0, 0) before a sample."""
        samples = list(self._samples)  # the scrape runs on the metrics thread
        if not samples:
            return 0.0, 0.0
        newest = samples[-1][0]
        return samples[-1][1], max(lag for t, lag in samples if newest - t <= _WINDOW_S)

    def collect(self) -> Iterator[Metric]:
        latest, worst = self.lag()
        for name, text, value in (
            ("lakemq_broker_event_loop_lag_seconds",
             "How late the broker's event loop last ran a timer it set (sampled twice a second).", latest),
            ("lakemq_broker_event_loop_lag_max_seconds",
             "The worst event-loop lag of the last minute.", worst),
        ):
            gauge = GaugeMetricFamily(name, text, labels=["broker"])
            gauge.add_metric([self._broker], value)
            yield gauge
