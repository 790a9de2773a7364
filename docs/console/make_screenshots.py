"""Regenerate docs/console/*.png: boots a name server, a broker and a local lake with sample
data (tests/console/console_env.py), starts ``lakemq console`` and drives headless Chromium
over the main pages.

    .venv/bin/python docs/console/make_screenshots.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from tests.console.browser import start_browser
from tests.console.console_env import GROUP, TOPIC, ConsoleEnv, console_env

OUT = Path(__file__).resolve().parent
EXTRA_TOPICS = {"payments": 8, "inventory": 4, "notifications": 2, "audit-log": 1, "shipments": 4}


async def _more_data(namesrv: str, seconds: float) -> None:
    """More topics, and a trickle of orders while the console samples, so the lag moves."""
    async with Admin(namesrv) as admin:
        for name, queues in EXTRA_TOPICS.items():
            await admin.create_topic(name, queue_nums=queues, order=name == "audit-log")
    async with Producer("screenshot_producer", namesrv_addr=namesrv) as producer:
        deadline = time.monotonic() + seconds
        i = 1000
        while time.monotonic() < deadline:
            for name in ("payments", "inventory"):
                await producer.send(Message(name, f"{name} event {i}".encode()))
            msg = Message(TOPIC, f'{{"order": {i}, "amount": {i % 97}}}'.encode())
            msg.keys = f"order-{i}"
            await producer.send(msg)
            i += 1
            await asyncio.sleep(0.05)


def _shot(driver: Any, url: str, name: str) -> None:
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.get(url)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 1360, "height": min(max(height, 600), 1800), "deviceScaleFactor": 1, "mobile": False})
    driver.save_screenshot(str(OUT / f"{name}.png"))
    print(f"saved {OUT / name}.png")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, console_env(Path(tmp)) as env:
        # Traffic keeps flowing while the pages are shot, so TPS and lag are live numbers.
        traffic = threading.Thread(target=asyncio.run, args=(_more_data(env.cluster.namesrv_addr, 25.0),))
        traffic.start()
        time.sleep(8.0)
        shoot(env)
        traffic.join()


def shoot(env: ConsoleEnv) -> None:
    driver = start_browser()
    try:
        base = env.url.rstrip("/")
        driver.get(base + "/topics")  # the console samples message counts of topics it has shown
        time.sleep(2.0)
        _shot(driver, base + "/", "overview")
        _shot(driver, base + "/topics", "topics")
        _shot(driver, base + f"/groups/{GROUP}", "consumer-lag")
        _shot(driver, base + f"/search?topic={TOPIC}&key=order-7&go=1", "search")
        key = env.dead_keys[0]
        _shot(driver, base + f"/message?id={env.msg_ids[key]}&topic={TOPIC}", "message")
        _shot(driver, base + "/tiering", "tiering")
        _shot(driver, base + f"/dlq?topic=%25DLQ%25{GROUP}", "dlq")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
