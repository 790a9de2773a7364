"""SYNC_FLUSH sends acknowledged through the group commit on the broker's event loop: many
concurrent producers (a real broker process) all answered with the right queue offsets, and a
disk stuck in an fdatasync answered FLUSH_DISK_TIMEOUT at the deadline (in process)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageExt
from lakemq.common.record import iter_records
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import CreateTopicRequestHeader
from lakemq.store.group_commit import GroupCommit
from tests.broker.wire import batch_request, in_process_broker, pull_request, request, send_request
from tests.cluster import start_cluster

pytestmark = pytest.mark.timeout(120)
TOPIC = "SyncFlushMany"
QUEUES = 4
PRODUCERS = 32
SENDS = 30
BATCH_PRODUCERS = 4
BATCHES = 10
BATCH_SIZE = 5


async def _producer(addr: str, n: int) -> list[tuple[list[bytes], RemotingCommand]]:
    """One connection sending one message at a time, as a synchronous producer does."""
    client = RemotingClient()
    try:
        out = []
        for i in range(n):
            body = f"p{n}-{id(client)}-{i}".encode()
            response = await client.invoke(addr, send_request(TOPIC, body, queue_id=i % QUEUES), 30.0)
            out.append(([body], response))
        return out
    finally:
        await client.shutdown()


async def _batch_producer(addr: str, k: int) -> list[tuple[list[bytes], RemotingCommand]]:
    client = RemotingClient()
    try:
        out = []
        for i in range(BATCHES):
            bodies = [f"b{k}-{i}-{j}".encode() for j in range(BATCH_SIZE)]
            response = await client.invoke(addr, batch_request(TOPIC, bodies, queue_id=(k + i) % QUEUES), 30.0)
            out.append((bodies, response))
        return out
    finally:
        await client.shutdown()


async def _send_all(addr: str) -> dict[int, dict[int, tuple[bytes, str]]]:
    """queue id -> queue offset -> (body, msg id), from the send responses."""
    client = RemotingClient()
    try:
        header = CreateTopicRequestHeader(TOPIC, "TBW102", QUEUES, QUEUES, 6, "SINGLE_TAG")
        created = await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), 10.0)
        assert created.code == ResponseCode.SUCCESS, created.remark
    finally:
        await client.shutdown()
    singles = [_producer(addr, SENDS) for _ in range(PRODUCERS)]
    batches = [_batch_producer(addr, k) for k in range(BATCH_PRODUCERS)]
    results = await asyncio.gather(*singles, *batches)
    by_queue: dict[int, dict[int, tuple[bytes, str]]] = {q: {} for q in range(QUEUES)}
    for sent in results:
        for bodies, response in sent:
            assert response.code == ResponseCode.SUCCESS, response.remark
            queue, first = int(response.ext_fields["queueId"]), int(response.ext_fields["queueOffset"])
            ids = response.ext_fields["msgId"].split(",")
            for j, (body, msg_id) in enumerate(zip(bodies, ids, strict=True)):
                assert first + j not in by_queue[queue], f"queue {queue} offset {first + j} answered twice"
                by_queue[queue][first + j] = (body, msg_id)
    return by_queue


def test_many_concurrent_sync_flush_producers_all_acknowledged(tmp_path: Path) -> None:
    with start_cluster(tmp_path, broker_conf={"flushDiskType": "SYNC_FLUSH"}) as cluster:
        addr = cluster.broker_addr()
        by_queue = asyncio.run(_send_all(addr))
        total = sum(len(offsets) for offsets in by_queue.values())
        assert total == PRODUCERS * SENDS + BATCH_PRODUCERS * BATCHES * BATCH_SIZE
        for offsets in by_queue.values():
            assert sorted(offsets) == list(range(len(offsets)))  # no gap, no duplicate

        async def pull_all() -> None:
            client = RemotingClient()
            try:
                for queue, offsets in by_queue.items():
                    pulled: list[MessageExt] = []
                    deadline = time.monotonic() + 10
                    while len(pulled) < len(offsets):
                        assert time.monotonic() < deadline, f"queue {queue}: {len(pulled)} of {len(offsets)}"
                        r = await client.invoke(addr, pull_request("g-syncflush", TOPIC, queue, len(pulled)), 10.0)
                        if r.code == ResponseCode.SUCCESS:
                            pulled.extend(iter_records(r.body, check_crc=True))
                        else:
                            await asyncio.sleep(0.05)  # dispatch still behind
                    for m in pulled:
                        assert (m.body, m.msg_id) == offsets[m.queue_offset]
            finally:
                await client.shutdown()

        asyncio.run(pull_all())


async def test_a_stuck_fdatasync_answers_flush_disk_timeout_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with in_process_broker(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout="200") as (
        controller,
        client,
    ):
        addr = controller.broker_addr
        first = await client.invoke(addr, send_request("Stuck", b"healthy"), 5.0)
        assert first.code == ResponseCode.SUCCESS, first.remark
        monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "2000")
        assert controller.store is not None
        group_commit = controller.store.commit_log.flush_service
        assert isinstance(group_commit, GroupCommit)
        group_commit.advance()  # hands the delay to the commit thread now (PutAcks does every 10 ms)
        started = time.monotonic()
        late = await client.invoke(addr, send_request("Stuck", b"slow"), 5.0)
        waited = time.monotonic() - started
        # Answered at its deadline (PutAcks) while the commit thread still sleeps before its fdatasync.
        assert late.code == ResponseCode.FLUSH_DISK_TIMEOUT, late.remark
        assert late.ext_fields["queueOffset"] == "1"  # stored: the producer learns where
        assert 0.15 < waited < 1.5
        monkeypatch.delenv("LAKEMQ_FAULT_FSYNC_DELAY_MS")
