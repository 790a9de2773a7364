"""The event-loop lag gauge: a loop held by a blocking call shows it as lag, on the scrape."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakemq.broker.loop_lag import LoopLagProbe


def test_a_blocked_loop_shows_as_lag_for_a_minute() -> None:
    probe = LoopLagProbe("broker-a", interval_s=0.05)

    async def blocked_once() -> None:
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(0.2)  # a few on-time wake-ups first
        time.sleep(0.4)  # noqa: ASYNC251 -- the point: something holds the loop
        deadline = time.monotonic() + 10
        while probe.lag()[1] < 0.3:  # the probe's wake-up after the hold records it
            assert time.monotonic() < deadline, probe.lag()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # on-time wake-ups again
        task.cancel()

    asyncio.run(blocked_once())
    latest, worst = probe.lag()
    assert latest < 0.3 <= worst
    registry = CollectorRegistry()
    registry.register(probe)
    scraped = {s.name: s.value for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples if s.labels == {"broker": "broker-a"}}
    assert scraped["lakemq_broker_event_loop_lag_max_seconds"] == worst
    assert scraped["lakemq_broker_event_loop_lag_seconds"] == latest


def test_no_lag_before_the_first_sample() -> None:
    assert LoopLagProbe("broker-a").lag() == (0.0, 0.0)
