"""Cold reads end to end: a real broker with tiny CommitLog files and a local lake, tiered by
``lakemq tier run``, its tiered files deleted by the broker's own guarded expiry; a new group
pulling from offset 0 gets every message once, in order, across the lake -> hot boundary."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.results import PullStatus
from lakemq.common.message import Message
from lakemq.tiering.cold_read import ColdReader
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import commitlog_files
from tests.cli_in_process import tier_run_in_process
from tests.cluster import cold_read_broker_conf, start_cluster

# `lakemq tier run` runs in this process on the test's session (tests/cli_in_process.py).
pytestmark = [pytest.mark.spark, pytest.mark.slow]

BROKER = "broker-a"
TOPIC = "cold_orders"
COUNT = 240
BODY_PAD = 900


def _broker_conf(lake: Path) -> dict[str, str]:
    # Small ConsumeQueue files too, so their clean-up follows the CommitLog's.
    return cold_read_broker_conf(lake, mappedFileSizeConsumeQueue=str(20 * 40))


async def _produce(namesrv: str) -> dict[str, tuple[bytes, str | None, dict[str, str]]]:
    await create_routed_topic(namesrv, TOPIC, queue_nums=2)
    sent: dict[str, tuple[bytes, str | None, dict[str, str]]] = {}
    async with Producer("cold_read_producer", namesrv_addr=namesrv) as producer:
        for i in range(COUNT):
            msg = Message(TOPIC, f"order-{i}:".encode() + b"x" * BODY_PAD)
            msg.keys = f"key-{i}"
            msg.tags = "paid" if i % 3 == 0 else "new"
            msg.properties["seq"] = str(i)
            await producer.send(msg)
            sent[f"key-{i}"] = (msg.body, msg.tags, {"seq": str(i)})
    return sent


def _tier(spark: Any, root: Path, store: Path, lake: Path) -> None:
    # --no-retention: with a broker running, its guarded expiry deletes the tiered files.
    done = tier_run_in_process(spark, root, store, lake, BROKER, "--no-retention")
    assert done.returncode == 0, done.stderr[-3000:]


async def _min_offsets(namesrv: str) -> list[int]:
    async with PullConsumer("cold_read_min", namesrv_addr=namesrv) as consumer:
        return [await consumer.min_offset(mq) for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC))]


async def _pull_all(namesrv: str, group: str, tags: str) -> tuple[dict[int, list], list[int]]:
    by_queue: dict[int, list] = {}
    mins: list[int] = []
    async with PullConsumer(group, namesrv_addr=namesrv) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC)):
            mins.append(await consumer.min_offset(mq))
            high = await consumer.max_offset(mq)
            offset, got, retries = 0, [], 0
            while offset < high:
                result = await consumer.pull(mq, tags, offset, 16)
                assert result.pull_status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG), result
                if result.next_begin_offset == offset:
                    # Retry here (a pull on the broker's loop met a record expiry just removed:
                    # its retry reads the lake), as a consumer does; it must not repeat.
                    assert result.pull_status is PullStatus.NO_MATCHED_MSG and not retries, result
                    retries += 1
                    continue
                assert result.next_begin_offset > offset
                got.extend(result.msgs)
                offset, retries = result.next_begin_offset, 0
            by_queue[mq.queue_id] = got
    return by_queue, mins


def test_new_group_reads_lake_then_hot_exactly_once(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=_broker_conf(lake)) as cluster:
        namesrv = cluster.namesrv_addr
        store = tmp_path / BROKER / "store"
        sent = asyncio.run(_produce(namesrv))
        files_before = commitlog_files(store)
        assert len(files_before) >= 4
        time.sleep(1.0)  # expiry runs, but the guard (no manifest yet) keeps every file
        assert len(commitlog_files(store)) == len(files_before)
        _tier(spark, tmp_path, store, lake)
        # The broker expires the tiered CommitLog files, then (its next clean-up pass) the
        # ConsumeQueue entries below them: from then on its queues start above 0.
        deadline = time.monotonic() + 20
        while (commitlog_files(store)[0].start == files_before[0].start
               or not any(m > 0 for m in asyncio.run(_min_offsets(namesrv)))):
            assert time.monotonic() < deadline, "the broker never expired the tiered files"
            time.sleep(0.2)

        by_queue, mins = asyncio.run(_pull_all(namesrv, "cold_read_all", "*"))
        assert any(m > 0 for m in mins), mins  # part of each queue is only in the lake
        received = 0
        for queue_id, msgs in by_queue.items():
            assert [m.queue_offset for m in msgs] == list(range(len(msgs))), queue_id
            for m in msgs:
                body, tags, props = sent[m.keys[0]]
                assert (m.body, m.tags, m.properties["seq"]) == (body, tags, props["seq"])
            received += len(msgs)
        assert received == COUNT

        boot = (tmp_path / BROKER / f"{BROKER}.out").read_text()
        metrics_url = re.search(r"metrics (http://\S+)", boot)
        assert metrics_url, boot
        scraped = urllib.request.urlopen(metrics_url.group(1), timeout=10).read().decode()
        cold = re.search(r'lakemq_broker_cold_reads_total\{[^}]*topic="cold_orders"[^}]*\} (\S+)', scraped)
        assert cold and float(cold.group(1)) > 0, scraped[-2000:]

        tagged, _ = asyncio.run(_pull_all(namesrv, "cold_read_paid", "paid"))
        paid = sorted(int(m.properties["seq"]) for msgs in tagged.values() for m in msgs)
        assert paid == list(range(0, COUNT, 3))

        # Read-ahead: a walk of 16-offset pulls over the lake range costs one lake read per block.
        reader = ColdReader(LakeLocation.of(str(lake)), block_size=64)
        hot_min = max(mins)
        offset, pulls = 0, 0
        while offset < hot_min:
            records = reader.read(TOPIC, mins.index(hot_min), offset, hot_min, 16)
            assert records and records[0].queue_offset == offset
            offset, pulls = records[-1].queue_offset + 1, pulls + 1
        assert pulls >= 3
        assert reader.stats.lake_reads == -(-hot_min // 64) < pulls


def test_tier_run_retention_next_to_a_running_broker_loses_nothing(spark: Any, tmp_path: Path) -> None:
    """``tier run`` unlinking tiered files under the broker: the broker serves them from its
    mappings, then its own expiry drops them and those offsets come from the lake."""
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=_broker_conf(lake)) as cluster:
        namesrv = cluster.namesrv_addr
        store = tmp_path / BROKER / "store"
        asyncio.run(_produce(namesrv))
        files_before = commitlog_files(store)
        done = tier_run_in_process(spark, tmp_path, store, lake, BROKER, broker_conf=_broker_conf(lake))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(commitlog_files(store)) < len(files_before)  # tier run deleted some itself
        deadline = time.monotonic() + 20
        while True:  # the broker's expiry drops its mappings of the unlinked files
            by_queue, mins = asyncio.run(_pull_all(namesrv, "cold_read_after_tier", "*"))
            if any(m > 0 for m in mins):
                break
            assert time.monotonic() < deadline, "the broker never expired the unlinked files"
            time.sleep(0.5)
        assert sum(len(msgs) for msgs in by_queue.values()) == COUNT
        for queue_id, msgs in by_queue.items():
            assert [m.queue_offset for m in msgs] == list(range(len(msgs))), queue_id
        assert cluster.stop_broker(BROKER) == 0
