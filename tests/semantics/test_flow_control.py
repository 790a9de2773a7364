"""Flow control end to end, against real NameServer and broker processes.

Broker side (RocketMQ 4.x's fast failure): a send that waited more than
waitTimeMillsInSendQueue at the head of the send queue, or that arrives while the CommitLog
append lock has been held more than osPageCacheBusyTimeOutMills, is refused at once with
SYSTEM_BUSY (RocketMQ's code; lakemq's client also treats the seeds' TOO_MANY_REQUESTS 530 as
flow control). The slow store is lakemq.common.faults' LAKEMQ_FAULT_APPEND_STALL_MS in the
broker's environment, under SYNC_FLUSH on a device taken to need stable pages
(LAKEMQ_FAULT_STABLE_WRITES) so sends run in the send pool.

Client side: the producer retries flow-control refusals after 1 s, then 1.6 s (+-20 %), and
a push consumer stops pulling while its cache is over the count, size or span threshold
(the span, as RocketMQ's, is that of the messages still cached: newest minus oldest offset).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendResult,
    SendStatus,
)
from lakemq.client.admin import Admin
from lakemq.client.config import ClientConfig
from lakemq.client.process_queue import ProcessQueue
from lakemq.common.codes import ResponseCode
from lakemq.remoting import RemotingClient
from tests.cluster import start_cluster
from tests.semantics.raw import timed_send

SYNC = {"flushDiskType": "SYNC_FLUSH"}


async def _create_topic(ns: str, topic: str) -> None:
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1)


def test_sends_waiting_in_the_send_queue_fail_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_FAULT_APPEND_STALL_MS", "400")
    monkeypatch.setenv("LAKEMQ_FAULT_STABLE_WRITES", "1")
    conf = {**SYNC, "sendMessageThreadPoolNums": "1", "waitTimeMillsInSendQueue": "200"}
    with start_cluster(tmp_path, broker_conf=conf) as cluster:
        addr, topic = cluster.broker_addr(), "QueueWait"

        async def burst() -> list:
            await _create_topic(cluster.namesrv_addr, topic)
            client = RemotingClient()
            try:
                return list(await asyncio.gather(*(timed_send(client, addr, topic, f"m{i}".encode())
                                                   for i in range(10))))
            finally:
                await client.shutdown()

        answers = asyncio.run(burst())
    for a in answers:
        print(f"{ResponseCode(a.code).name} after {a.seconds * 1000:.0f} ms: {a.remark}")
    ok = [a for a in answers if a.code == ResponseCode.SUCCESS]
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    # One append at a time, 400 ms each: the first is stored, the ones queued behind it are
    # refused once they waited 200 ms, long before their turn (which would be 0.8 s to 4 s).
    assert len(ok) == 1 and ok[0].seconds >= 0.4
    assert len(busy) == 9, [(a.code, a.remark) for a in answers]
    assert all("[TIMEOUT_CLEAN_QUEUE]" in a.remark and 0.2 <= a.seconds < 0.7 for a in busy)


def test_page_cache_busy_refuses_at_once_and_the_producer_backs_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    stall = 2.4
    monkeypatch.setenv("LAKEMQ_FAULT_APPEND_STALL_MS", str(int(stall * 1000)))
    monkeypatch.setenv("LAKEMQ_FAULT_STABLE_WRITES", "1")
    # RocketMQ's own spelling of the key; the append lock counts as busy after 0.5 s here.
    conf = {**SYNC, "osPageCacheBusyTimeOutMills": "500"}
    caplog.set_level(logging.WARNING, logger="lakemq.client.sender")
    with start_cluster(tmp_path, broker_conf=conf) as cluster:
        ns, addr, topic = cluster.namesrv_addr, cluster.broker_addr(), "PageCacheBusy"

        async def scenario() -> tuple[float, SendResult, float]:
            await _create_topic(ns, topic)
            client = RemotingClient()
            client_config = ClientConfig(namesrv_addr=ns, instance_name="busy")
            try:
                async with Producer("BusyProducer", client_config=client_config) as producer:
                    await producer.fetch_publish_message_queues(topic)  # route cached before the stall
                    holder = asyncio.ensure_future(timed_send(client, addr, topic, b"holds the lock"))
                    await asyncio.sleep(0.7)  # the lock is now held for longer than 0.5 s
                    probe = await timed_send(client, addr, topic, b"refused")
                    assert probe.code == ResponseCode.SYSTEM_BUSY and "[REJECTREQUEST]" in probe.remark, probe
                    started = time.monotonic()
                    result = await producer.send(Message(topic, b"backs off"))
                    elapsed = time.monotonic() - started
                    assert (await holder).code == ResponseCode.SUCCESS
                    return probe.seconds, result, elapsed
            finally:
                await client.shutdown()

        probe_s, result, elapsed = asyncio.run(scenario())
    failures = [r.created for r in caplog.records if "BACKOFF" in r.getMessage()]
    print(f"refusal answered in {probe_s * 1000:.0f} ms; producer: {len(failures)} refusals, "
          f"gap {failures[1] - failures[0]:.2f} s, sent after {elapsed:.2f} s" if len(failures) == 2 else failures)
    assert probe_s < 0.3  # refused without touching the store
    assert result.send_status is SendStatus.SEND_OK
    # Attempt 1 (t=0) and attempt 2 (t~1 s) met the busy lock, attempt 3 (t~2.6 s) got through.
    assert len(failures) == 2
    first_backoff = failures[1] - failures[0]
    assert 0.75 <= first_backoff <= 1.45  # 1 s +- 20 %
    # The first backoff as measured (its jitter may make it 0.8 s), the second (1.6 s +- 20 %),
    # then this send's own stalled append.
    assert first_backoff + 1.28 + stall <= elapsed <= first_backoff + 1.92 + stall + 1.0


def _sampling(pqs: Callable[[], list[ProcessQueue]], peaks: dict[str, int]) -> asyncio.Task[None]:
    async def sample() -> None:
        while True:
            for pq in pqs():
                peaks["count"] = max(peaks["count"], pq.msg_count)
                peaks["size"] = max(peaks["size"], pq.msg_size)
                peaks["span"] = max(peaks["span"], pq.max_span())
            await asyncio.sleep(0.005)

    return asyncio.ensure_future(sample())


@pytest.mark.parametrize("limit", ["count", "size", "span"])
async def test_push_consumer_cache_stays_within_one_pull_batch_of_its_threshold(tmp_path: Path, limit: str) -> None:
    batch, total = 4, 48
    body_size = 128 * 1024 if limit == "size" else 100
    config = {
        "count": {"pull_threshold_for_queue": 10},
        "size": {"pull_threshold_size_for_queue": 1},  # MiB: 8 bodies of 128 KiB
        "span": {"consume_concurrently_max_span": 12, "consume_thread_max": 2},
    }[limit]
    with start_cluster(tmp_path) as cluster:
        ns, topic = cluster.namesrv_addr, f"Flow{limit}"
        await _create_topic(ns, topic)
        async with Producer("FlowProducer", client_config=ClientConfig(namesrv_addr=ns, instance_name="fp")) as p:
            for i in range(total):
                await p.send(Message(topic, i.to_bytes(4, "big") + bytes(body_size - 4)))
        gate = asyncio.Event()
        consumed: set[int] = set()

        async def listener(msgs: list[MessageExt], _ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
            for m in msgs:
                if limit == "span":
                    # Slow, but moving: the oldest cached offset advances, and without the span
                    # limit the whole topic (span 47) would be cached at once.
                    await asyncio.sleep(0.05)
                else:
                    await gate.wait()
                consumed.add(int.from_bytes(m.body[:4], "big"))
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer = PushConsumer("FlowGroup", config=ConsumerConfig(
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, pull_batch_size=batch, **config),
            client_config=ClientConfig(namesrv_addr=ns, instance_name="flow", rebalance_interval=1000))
        consumer.subscribe(topic)
        consumer.register_message_listener_concurrently(listener)
        peaks = {"count": 0, "size": 0, "span": 0}
        await consumer.start()
        sampler = _sampling(lambda: list(consumer._rebalancer.process_queues.values())  # type: ignore[union-attr]
                            if consumer._rebalancer else [], peaks)
        try:
            deadline = time.monotonic() + 20
            while peaks[limit] < {"count": 10, "size": 1 << 20, "span": 12}[limit] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # pulling is paused: nothing more may arrive meanwhile
            held = dict(peaks)
            gate.set()
            while len(consumed) < total and time.monotonic() < deadline + 10:
                await asyncio.sleep(0.05)
        finally:
            gate.set()
            sampler.cancel()
            await consumer.shutdown()
    print(f"{limit}: peaks while the listener was held {held}, over the run {peaks}")
    if limit == "count":
        assert 10 < held["count"] <= 10 + batch
    elif limit == "size":
        assert 1 << 20 < held["size"] <= (1 << 20) + batch * body_size
    else:  # over the whole run: a pull starts only while the cached span is <= 12
        assert 12 < peaks["span"] <= 12 + batch
    assert consumed == set(range(total))  # nothing lost once the listener goes on
