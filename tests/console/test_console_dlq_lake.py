"""The dead-letter page over a broker whose oldest dead letters were tiered and deleted: they
are listed from the lake (as the trace page finds them), and re-sent from there."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.common.message import Message
from lakemq.tiering.seal import commitlog_files
from tests.cli_in_process import tier_run_in_process
from tests.cluster import cold_read_broker_conf, start_cluster
from tests.console.console_env import ConsoleEnv, start_console, stop_console

BROKER = "broker-a"
TOPIC = "dlq_orders"
GROUP = "dlq_billing"
DLQ = f"%DLQ%{GROUP}"


async def _dead_letters(namesrv: str, broker: str, first: int, count: int) -> list[str]:
    """Produce COUNT messages and send each straight to GROUP's DLQ; their keys."""
    keys = []
    async with PullConsumer(GROUP, namesrv_addr=namesrv) as consumer:
        starts = {mq: await consumer.max_offset(mq) for mq in await consumer.fetch_subscribe_message_queues(TOPIC)}
    async with Producer("dlq_producer", namesrv_addr=namesrv) as producer:
        for i in range(first, first + count):
            msg = Message(TOPIC, f"dead-{i}".encode())
            msg.keys = f"dead-{i}"
            await producer.send(msg)
            keys.append(msg.keys[0])
    async with PullConsumer(GROUP, namesrv_addr=namesrv) as consumer:
        pending, deadline = set(keys), time.monotonic() + 15
        while pending:  # a send is answered once stored; the pull sees it once dispatched
            assert time.monotonic() < deadline, f"{sorted(pending)} never became pullable"
            for mq, start in starts.items():
                result = await consumer.pull(mq, "*", start, 64)
                for msg in result.msgs:
                    if msg.keys and msg.keys[0] in pending:
                        pending.discard(msg.keys[0])
                        await consumer.core.instance.api.consumer_send_msg_back(
                            broker, commit_log_offset=msg.commit_log_offset, group=GROUP, delay_level=-1,
                            origin_msg_id=msg.msg_id, origin_topic=TOPIC, max_reconsume_times=16)
            await asyncio.sleep(0.05)
    return keys


async def _fill(namesrv: str, count: int) -> None:
    """Enough other messages to seal the CommitLog files holding the first dead letters."""
    async with Producer("dlq_filler", namesrv_addr=namesrv) as producer:
        for i in range(count):
            await producer.send(Message(TOPIC, f"fill-{i}:".encode() + b"x" * 900))


async def _dlq_min_offset(namesrv: str) -> int:
    async with PullConsumer("dlq_probe", namesrv_addr=namesrv) as consumer:
        return min([await consumer.min_offset(mq) for mq in await consumer.fetch_subscribe_message_queues(DLQ)])


async def _pull_dlq(namesrv: str, count: int) -> list[str]:
    """Every dead letter, once COUNT were dispatched (a send-back is answered once stored)."""
    bodies = []
    async with PullConsumer("dlq_reader", namesrv_addr=namesrv) as consumer:
        queues = await consumer.fetch_subscribe_message_queues(DLQ)
        deadline = time.monotonic() + 15
        while sum([await consumer.max_offset(mq) for mq in queues]) < count:
            assert time.monotonic() < deadline, "the dead letters were never dispatched"
            await asyncio.sleep(0.05)
        for mq in queues:
            offset, high = 0, await consumer.max_offset(mq)
            while offset < high:
                result = await consumer.pull(mq, "*", offset, 32)
                assert result.next_begin_offset > offset, result
                bodies += [m.body.decode() for m in result.msgs]
                offset = result.next_begin_offset
    return bodies


async def _await_topic(namesrv: str, topic: str) -> None:
    async with Admin(namesrv) as admin:
        deadline = time.monotonic() + 15
        while topic not in await admin.list_topics():
            assert time.monotonic() < deadline, f"{topic} never reached the name server"
            await asyncio.sleep(0.1)


def test_tiered_dead_letters_are_listed_from_the_lake_and_can_be_resent(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=cold_read_broker_conf(lake)) as cluster:
        namesrv, broker = cluster.namesrv_addr, cluster.broker_addr(BROKER)
        store = tmp_path / BROKER / "store"

        async def prepare() -> list[str]:
            async with Admin(namesrv) as admin:
                await admin.create_topic(TOPIC, queue_nums=1)
            await _await_topic(namesrv, TOPIC)
            return await _dead_letters(namesrv, broker, 0, 2)

        tiered_keys = asyncio.run(prepare())
        asyncio.run(_await_topic(namesrv, DLQ))
        asyncio.run(_fill(namesrv, 150))
        first_file = commitlog_files(store)[0].start
        done = tier_run_in_process(spark, tmp_path, store, lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 30  # the broker's own expiry deletes what the lake holds
        while commitlog_files(store)[0].start == first_file or asyncio.run(_dlq_min_offset(namesrv)) == 0:
            assert time.monotonic() < deadline, "the tiered dead letters never left the hot tier"
            time.sleep(0.2)
        hot_keys = asyncio.run(_dead_letters(namesrv, broker, 1000, 1))
        # The broker serves a pull below the hot tier from the lake (a cold read), %DLQ% topics too.
        assert asyncio.run(_pull_dlq(namesrv, 3)) == [f"dead-{i}" for i in (0, 1, 1000)]

        process, url = start_console(namesrv, lake, tmp_path)
        try:
            env = ConsoleEnv(cluster, lake, url, process)
            status, page = env.get(f"/dlq?topic=%25DLQ%25{GROUP}")
            assert status == 200, page
            table = page.split('id="dlq"')[1]
            rows = table.split("<tr>")[2:]
            by_key = {key: row for row in rows for key in tiered_keys + hot_keys if f">{key}<" in row}
            assert set(by_key) == set(tiered_keys + hot_keys), table
            for key in tiered_keys:  # only in the lake now: the hot tier starts after them
                assert re.search(r'class="badge source teal">lake<', by_key[key])
                assert ">hot<" not in by_key[key]
            assert ">hot<" in by_key[hot_keys[0]]
            lake_id = re.search(r'name="id" value="([0-9A-F]+)"', by_key[tiered_keys[0]]).group(1)
            status, page = env.get("/dlq/resend", "POST", {"id": lake_id, "topic": DLQ})
            assert status == 200, page
            new_id = re.search(rf'id="resent">re-sent to {TOPIC}: ([0-9A-F]+)<', page)
            assert new_id, page
        finally:
            stop_console(process)

        async def resent() -> list[str]:
            async with Admin(namesrv) as admin:
                deadline = time.monotonic() + 15
                while not (found := await admin.query_message(TOPIC, new_id.group(1), unique_key=True)):
                    assert time.monotonic() < deadline, "the re-sent message was never indexed"
                    await asyncio.sleep(0.05)
            return [m.body.decode() for m in found]

        assert asyncio.run(resent()) == ["dead-0"]
