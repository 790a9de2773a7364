"""``lakemq reindex`` on a real broker's store: refused while the broker runs; after the
broker stopped and its consumequeue/ and index/ were deleted, the rebuild equals what the
broker wrote, and the broker started again on it serves pulls and key queries."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from reindex_helpers import STORE_CONF, snapshot

from bench.topics import create_routed_topic
from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.results import PullStatus
from lakemq.common.message import Message
from lakemq.tiering.seal import commitlog_files
from tests.cli_in_process import lakemq_in_process
from tests.cluster import lakemq_command, start_cluster

# The rebuild runs Spark, on the worker's session (tests/cli_in_process.py).
pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "reindex_orders"
COUNT = 150


def _reindex(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAKEMQ_LOG_DIR": str(tmp / "reindex-logs")}
    return subprocess.run(lakemq_command("reindex", *args), env=env, capture_output=True, text=True,
                          timeout=300, check=False)


async def _produce(namesrv: str) -> None:
    await create_routed_topic(namesrv, TOPIC, queue_nums=3)
    async with Producer("reindex_producer", namesrv_addr=namesrv) as producer:
        for i in range(COUNT):
            msg = Message(TOPIC, f"order-{i}:".encode() + b"x" * 500)
            msg.keys = f"key-{i}"
            msg.tags = "paid" if i % 3 == 0 else "new"
            if i % 40 == 5:
                msg.delay_time_level = 2  # 5 s: delivered before the broker stops
            await producer.send(msg)


async def _pull_all(namesrv: str, tags: str) -> list[str]:
    bodies: list[str] = []
    async with PullConsumer("reindex_reader", namesrv_addr=namesrv) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC)):
            offset, high = 0, await consumer.max_offset(mq)
            while offset < high:
                result = await consumer.pull(mq, tags, offset, 16)
                assert result.pull_status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG), result
                bodies += [m.body.decode().partition(":")[0] for m in result.msgs]
                offset = result.next_begin_offset
    return bodies


async def _query(namesrv: str, key: str) -> list[str]:
    async with Admin(namesrv) as admin:
        return [m.body.decode().partition(":")[0] for m in await admin.query_message(TOPIC, key)]


def test_bad_store_dir_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = _reindex("--store-dir", str(tmp_path / "nothing-here"), tmp=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [(f"error: {tmp_path / 'nothing-here'} is not a broker store "
                                                "(no commitlog/ directory)")]


def test_rebuilt_store_serves_pulls_and_key_queries(spark: Any, tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=STORE_CONF) as cluster:
        namesrv = cluster.namesrv_addr
        store = tmp_path / BROKER / "store"
        conf = tmp_path / BROKER / "broker.conf"
        asyncio.run(_produce(namesrv))
        assert len(commitlog_files(store)) >= 2
        everything = sorted(f"order-{i}" for i in range(COUNT))
        deadline = time.monotonic() + 30
        while sorted(asyncio.run(_pull_all(namesrv, "*"))) != everything:
            assert time.monotonic() < deadline, "the delayed messages were never delivered"
            time.sleep(0.5)

        running = _reindex("-c", str(conf), "--store-dir", str(store), "--master", "local[1]", tmp=tmp_path)
        assert running.returncode == 1
        assert f"in use by process {cluster.brokers[BROKER].proc.pid}" in running.stderr

        assert cluster.stop_broker(BROKER) == 0
        original = snapshot(store)
        shutil.rmtree(store / "consumequeue")
        shutil.rmtree(store / "index")
        # The rebuild is the command's work, not its process: in this process, on the test's
        # session (tests/cli_in_process.py), not a second driver.
        done = lakemq_in_process(spark, "reindex", "-c", str(conf), "--store-dir", str(store), "--master", "local[1]",
                                 env={"LAKEMQ_LOG_DIR": str(tmp_path / "reindex-logs")})
        assert done.returncode == 0, done.stderr[-3000:]
        assert "rebuilt" in done.stdout
        rebuilt = snapshot(store)
        assert {k: v for k, v in rebuilt.items() if k.startswith("consumequeue/")} == {
            k: v for k, v in original.items() if k.startswith("consumequeue/")}
        # names too: both name a file after its first record's store time
        assert sorted((k, v) for k, v in rebuilt.items() if k.startswith("index/")) == sorted(
            (k, v) for k, v in original.items() if k.startswith("index/"))

        cluster.start_broker(BROKER)
        assert sorted(asyncio.run(_pull_all(namesrv, "*"))) == everything
        assert sorted(asyncio.run(_pull_all(namesrv, "paid"))) == sorted(f"order-{i}" for i in range(0, COUNT, 3))
        assert asyncio.run(_query(namesrv, "key-77")) == ["order-77"]
        assert asyncio.run(_query(namesrv, "key-0")) == ["order-0"]
