"""Pulls that meet the broker's expiry half-way, on a broker that reads its lake (lakeUri).

Expiry deletes CommitLog files first and the ConsumeQueue files over them on a later pass, and
a pull can run between the two, or between a ConsumeQueue file's deletion and its queue's min
offset moving. RocketMQ answers those pulls by moving the consumer past the missing records
(they are lost there); here the lake holds them, so the broker serves them from it and the
consumer reads every message once, in order. The deletions are the store's own, made by hand
at the moment a race would make them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lakemq.broker.processor.pull_processor import PullMessageProcessor
from lakemq.common.codes import ResponseCode
from lakemq.common.record import iter_records
from lakemq.jobs.compact import compact
from lakemq.remoting import RemotingClient
from tests.broker.wire import in_process_broker, pull_request, send_request

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

TOPIC = "RaceTopic"
COUNT = 60
CQ_ENTRIES_PER_FILE = 20


async def _walk(client: RemotingClient, addr: str, group: str) -> list[bytes]:
    """Every body of queue 0 from offset 0, following nextBeginOffset as a consumer does."""
    offset, bodies = 0, []
    for _ in range(4 * COUNT):
        if offset >= COUNT:
            return bodies
        answer = await client.invoke(addr, pull_request(group, TOPIC, 0, offset, max_nums=8), 10.0)
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), answer
        bodies += [m.body for m in iter_records(answer.body)]
        offset = int(answer.ext_fields["nextBeginOffset"])
    raise AssertionError(f"the walk did not reach {COUNT}: at {offset}")


async def test_pulls_racing_expiry_read_the_lake_and_skip_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    conf = {"lakeUri": str(lake), "mappedFileSizeCommitLog": "4096",
            "mappedFileSizeConsumeQueue": str(CQ_ENTRIES_PER_FILE * 20),
            "cleanResourceInterval": "3600000"}  # no clean-up pass but the test's own
    async with in_process_broker(tmp_path, **conf) as (controller, client):
        addr, store = controller.broker_addr, controller.store
        assert store is not None
        sent = [b"r%03d:" % i + bytes(150) for i in range(COUNT)]
        for body in sent:
            assert (await client.invoke(addr, send_request(TOPIC, body), 5.0)).code == ResponseCode.SUCCESS
        while store.get_max_offset_in_queue(TOPIC, 0) < COUNT:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(compact, spark, store_dir=tmp_path / "store", lake_uri=str(lake),
                                broker_name=controller.broker_config.broker_name, seal_idle_ms=0)

        # The CommitLog's first two files go; the ConsumeQueue entries over them stay.
        log_files = store.commit_log.mapped_file_queue
        assert len(log_files.mapped_files) > 3
        assert store.commit_log.delete_expired_file(0, log_files.mapped_files[1].file_end_offset,
                                                    clean_immediately=True) == 2
        cq = store.consume_queues.find(TOPIC, 0)
        assert cq is not None and cq.get_min_offset_in_queue() == 0
        assert await _walk(client, addr, "g_removing") == sent

        # A pull that meets it on the event loop is told to retry at the same offset, and its
        # retry reads the lake in the pull pool.
        with monkeypatch.context() as m:
            m.setattr(PullMessageProcessor, "_reads_hot", lambda self, header: True)
            answer = await client.invoke(addr, pull_request("g_removing", TOPIC, 0, 0), 10.0)
        assert answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY and not answer.body
        assert answer.ext_fields["nextBeginOffset"] == "0"

        # The ConsumeQueue's first file goes before the queue's min offset has moved.
        assert cq.mapped_file_queue.delete_expired_file_by_offset(store.commit_log.get_min_offset(), 20) == 1
        assert cq.get_min_offset_in_queue() == 0 and cq.get_unit(0) is None
        assert await _walk(client, addr, "g_found_null") == sent

        # Expiry done: offsets below the min are served from the lake as ever.
        cq.correct_min_offset(store.commit_log.get_min_offset())
        assert cq.get_min_offset_in_queue() > 0
        assert await _walk(client, addr, "g_too_small") == sent
