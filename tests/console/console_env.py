"""A real cluster, a real local lake and a real ``lakemq console`` process for the console
tests: produced messages with keys (some tiered into the lake, some only hot), a consumer
group with lag and dead letters (sent before the lake run: still hot and in the lake)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.common.message import Message
from tests.cli_in_process import tier_run_in_process
from tests.cluster import Cluster, lakemq_command, start_cluster

BROKER = "broker-a"
TOPIC = "orders"
GROUP = "billing"
TIERED = 30  # messages of TOPIC produced before the lake run: hot and in the lake
HOT_ONLY = 20  # produced after it: hot only
DEAD = 2  # dead letters of GROUP


@dataclass
class ConsoleEnv:
    cluster: Cluster
    lake: Path
    url: str
    process: subprocess.Popen[str]
    msg_ids: dict[str, str] = field(default_factory=dict)  # key -> offset message id
    unique_keys: dict[str, str] = field(default_factory=dict)  # key -> UNIQ_KEY
    # GROUP's lag per queue of TOPIC, as the tests leave it (a test that adds to TOPIC calls
    # refresh_lags: the tests share one environment, in whatever order a worker runs them)
    lags: list[int] = field(default_factory=list)
    dead_keys: list[str] = field(default_factory=list)  # keys of the messages sent to GROUP's DLQ
    split_ms: int = 0  # after the tiered messages were stored, before the hot-only ones
    produced_ms: int = 0  # after every message of TOPIC the environment produced (tests add later ones)

    def refresh_lags(self) -> None:
        async def read() -> list[int]:
            async with Admin(self.cluster.namesrv_addr) as admin:
                return [row.lag for row in await admin.consumer_progress(GROUP, TOPIC)]

        self.lags = asyncio.run(read())

    def get(self, path: str, method: str = "GET", form: dict[str, str] | None = None) -> tuple[int, str]:
        from urllib.error import HTTPError
        from urllib.parse import urlencode

        data = urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except HTTPError as exc:
            return exc.code, exc.read().decode()


async def _produce(namesrv: str, env: ConsoleEnv, first: int, count: int) -> None:
    async with Producer("console_test_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            msg = Message(TOPIC, f'{{"order": {i}, "amount": {i * 10}}}'.encode())
            msg.keys = f"order-{i}"
            msg.tags = "paid" if i % 2 else "new"
            result = await producer.send(msg)
            env.unique_keys[f"order-{i}"] = result.msg_id
            env.msg_ids[f"order-{i}"] = result.offset_msg_id


async def _dead_letters(namesrv: str, broker_addr: str, env: ConsoleEnv) -> None:
    """GROUP sends the first DEAD messages of TOPIC straight to its DLQ."""
    async with PullConsumer(GROUP, namesrv_addr=namesrv) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC)):
            for msg in (await consumer.pull(mq, "*", 0, DEAD - len(env.dead_keys))).msgs:
                await consumer.core.instance.api.consumer_send_msg_back(
                    broker_addr, commit_log_offset=msg.commit_log_offset, group=GROUP, delay_level=-1,
                    origin_msg_id=msg.msg_id, origin_topic=TOPIC, max_reconsume_times=16)
                env.dead_keys.append(msg.keys[0])
            if len(env.dead_keys) == DEAD:
                break


async def _consume_half(namesrv: str, env: ConsoleEnv) -> None:
    """GROUP commits half of each queue of TOPIC: the rest is lag."""
    async with PullConsumer(GROUP, namesrv_addr=namesrv) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC)):
            high = await consumer.max_offset(mq)
            consumer.update_consume_offset(mq, high // 2)
            env.lags.append(high - high // 2)
        await consumer.persist_offsets()


async def _await_route(namesrv: str, topic: str) -> None:
    """Wait until the broker has registered ``topic`` with the name server (it does so soon
    after creating it, not at once)."""
    async with Admin(namesrv) as admin:
        deadline = time.monotonic() + 15
        while topic not in await admin.list_topics():
            assert time.monotonic() < deadline, f"{topic} never reached the name server"
            await asyncio.sleep(0.1)


def _tier(spark: Any, root: Path, lake: Path) -> None:
    done = tier_run_in_process(spark, root, root / BROKER / "store", lake, BROKER)
    assert done.returncode == 0, done.stderr[-3000:]


def start_console(namesrv: str, lake: Path | None, root: Path) -> tuple[subprocess.Popen[str], str]:
    args = ["console", "--namesrv", namesrv, "--port", "0", "--sample-interval", "0.5"]
    if lake is not None:
        args += ["--lake", str(lake)]
    process = subprocess.Popen(lakemq_command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "LAKEMQ_LOG_DIR": str(root / "console-logs")})
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"http://[\d.]+:\d+/", line)
    if not found:
        process.kill()
        raise AssertionError(f"console did not start: {line}{process.stdout.read()}")
    return process, found.group(0)


def stop_console(process: subprocess.Popen[str]) -> None:
    process.terminate()
    assert process.wait(timeout=20) == 0


@contextmanager
def console_env(root: Path, spark: Any) -> Iterator[ConsoleEnv]:
    lake = root / "lake"
    with start_cluster(root, brokers=(BROKER,)) as cluster:
        namesrv = cluster.namesrv_addr

        async def prepare() -> None:
            async with Admin(namesrv) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)
                await admin.create_topic("audit", queue_nums=1, order=True)

        asyncio.run(prepare())
        env = ConsoleEnv(cluster, lake, "", None)  # type: ignore[arg-type]
        asyncio.run(_produce(namesrv, env, 0, TIERED))
        asyncio.run(_dead_letters(namesrv, cluster.broker_addr(BROKER), env))
        _tier(spark, root, lake)  # the dead letters too: the trace shows them held by both tiers
        env.split_ms = int(time.time() * 1000)
        time.sleep(0.01)
        asyncio.run(_produce(namesrv, env, TIERED, HOT_ONLY))
        env.produced_ms = int(time.time() * 1000)
        asyncio.run(_consume_half(namesrv, env))
        asyncio.run(_await_route(namesrv, f"%DLQ%{GROUP}"))
        env.process, env.url = start_console(namesrv, lake, root)
        try:
            yield env
        finally:
            stop_console(env.process)


def write_topics(store: Path, count: int) -> None:
    """A topics.json holding ``count`` topics, as a broker persists it, for a broker to boot with."""
    config = store / "config"
    config.mkdir(parents=True, exist_ok=True)
    table = {f"bulk-{i:05d}": {"topicName": f"bulk-{i:05d}", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                               "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
             for i in range(count)}
    (config / "topics.json").write_text(json.dumps({"topicConfigTable": table,
                                                    "dataVersion": {"timestamp": int(time.time() * 1000),
                                                                    "counter": 1}}))
