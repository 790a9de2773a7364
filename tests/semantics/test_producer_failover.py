"""Producer fault tolerance against two real brokers, one of which is killed (kill -9) or slow.

With sendLatencyFaultEnable the producer keeps the seeds' tables (latencyMax 50 ... 15000 ms,
notAvailableDuration 0 ... 600000 ms; a failed send counts as 30000 ms, so a broker that failed
is out for 10 minutes). After the kill, a tombstone listens on the dead broker's port: it
counts every request that still reaches that address and drops the connection, as a dead
broker would fail it. The producer's fault clock is shifted (its injectable clock) instead of
waiting out the 10 minutes. The slow broker stalls every append (lakemq.common.faults'
LAKEMQ_FAULT_APPEND_STALL_MS in its environment only): a send of 550 ms or more puts it out for
30 s, and its stored messages count the sends that reached it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import Message, Producer, ProducerConfig, SendStatus
from lakemq.client.admin import Admin
from lakemq.client.config import ClientConfig
from lakemq.client.fault import FAILURE_LATENCY_MS, LatencyFaultTolerance, not_available_duration
from lakemq.common.codes import RequestCode
from lakemq.remoting.codec import FrameDecoder
from tests.cluster import Cluster, start_cluster


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, brokers=("broker-a", "broker-b")) as cluster:
        yield cluster


class Tombstone:
    """Listens where a dead broker was; counts the requests that still come, by code."""

    def __init__(self) -> None:
        self.requests: Counter[int] = Counter()
        self.server: asyncio.Server | None = None

    async def start(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.server = await asyncio.start_server(self._serve, host, int(port), reuse_address=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            commands = decoder.feed(data)
            self.requests.update(c.code for c in commands)
            if commands:
                break
        writer.close()

    @property
    def sends(self) -> int:
        return self.requests[RequestCode.SEND_MESSAGE_V2] + self.requests[RequestCode.SEND_MESSAGE]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_sends_go_on_and_the_dead_broker_sits_out_its_penalty(
        two_brokers: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    ns, topic = two_brokers.namesrv_addr, "Failover"
    caplog.set_level(logging.WARNING, logger="lakemq.client.sender")
    async with Admin(ns) as admin:
        assert sorted(await admin.create_topic(topic, queue_nums=2)) == ["broker-a", "broker-b"]
    shift_ms = 0.0
    # Routes are not refreshed during the test (RocketMQ polls every 30 s): the route still
    # lists the dead broker, so only fault tolerance keeps sends away from it.
    client = ClientConfig(namesrv_addr=ns, instance_name="failover", poll_name_server_interval=600_000)
    async with Producer("FailoverProducer", config=ProducerConfig(send_latency_fault_enable=True),
                        client_config=client) as producer:
        producer.sender.fault = LatencyFaultTolerance(clock=lambda: time.monotonic() * 1000 + shift_ms)

        async def send_many(n: int, tag: str) -> list[float]:
            took = []
            for i in range(n):
                started = time.monotonic()
                result = await producer.send(Message(topic, f"{tag}-{i}".encode()))
                took.append(time.monotonic() - started)
                assert result.send_status is SendStatus.SEND_OK
                if tag != "before":
                    assert result.message_queue.broker_name == "broker-a"
            return took

        await send_many(8, "before")
        b_addr = two_brokers.broker_addr("broker-b")
        two_brokers.kill_broker("broker-b")
        tombstone = Tombstone()
        await tombstone.start(b_addr)
        await asyncio.sleep(0.5)  # the producer sees its old connection to broker-b close
        try:
            took = await send_many(20, "after-kill")
            first_out = tombstone.sends
            shift_ms = not_available_duration(FAILURE_LATENCY_MS) - 1000.0  # 9 min 59 s later
            await send_many(10, "penalty-ending")
            still_out = tombstone.sends
            shift_ms = not_available_duration(FAILURE_LATENCY_MS) + 1000.0  # 10 min 1 s later
            took += await send_many(10, "penalty-over")
            tried_again = tombstone.sends
        finally:
            await tombstone.close()
    failures = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    print(f"attempts reaching the dead broker: {first_out} after the kill, {still_out} by the end of its "
          f"10-minute penalty, {tried_again} after it; slowest send {max(took) * 1000:.0f} ms; failures: {failures}")
    assert not_available_duration(FAILURE_LATENCY_MS) == 600_000
    assert first_out == 1  # one send met the dead broker, then it was isolated
    assert still_out == 1  # and avoided for the whole penalty
    assert tried_again == 2  # tried once when the penalty was over, and isolated again
    # Each failed attempt was the send's first, retried at once on broker-a (no backoff).
    assert len(failures) == 2 and all("attempt 1/3" in f and "broker-b" in f for f in failures)
    assert max(took) < 1.0


async def test_a_slow_broker_sits_out_the_latency_tables_penalty(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    stall_ms = 700  # between latencyMax 550 and 1000: 30 s out
    with start_cluster(tmp_path, brokers=("broker-a",)) as cluster:
        monkeypatch.setenv("LAKEMQ_FAULT_APPEND_STALL_MS", str(stall_ms))
        cluster.add_broker("broker-b")
        monkeypatch.delenv("LAKEMQ_FAULT_APPEND_STALL_MS")
        ns, topic = cluster.namesrv_addr, "SlowBroker"
        async with Admin(ns) as admin:
            assert sorted(await admin.create_topic(topic, queue_nums=2)) == ["broker-a", "broker-b"]

            async def stored_on_b() -> int:
                return sum(s.max_offset for s in await admin.topic_stats(topic) if s.mq.broker_name == "broker-b")

            shift_ms = 0.0
            client = ClientConfig(namesrv_addr=ns, instance_name="slow", poll_name_server_interval=600_000)
            async with Producer("SlowProducer", config=ProducerConfig(send_latency_fault_enable=True),
                                client_config=client) as producer:
                producer.sender.fault = LatencyFaultTolerance(clock=lambda: time.monotonic() * 1000 + shift_ms)

                async def send_many(n: int) -> list[float]:
                    took = []
                    for i in range(n):
                        started = time.monotonic()
                        assert (await producer.send(Message(topic, b"x"))).send_status is SendStatus.SEND_OK
                        took.append(time.monotonic() - started)
                    return took

                took = await send_many(10)
                first = await stored_on_b()
                shift_ms = not_available_duration(stall_ms) - 1000.0
                await send_many(6)
                during = await stored_on_b()
                shift_ms = not_available_duration(stall_ms) + 1000.0
                await send_many(6)
                after = await stored_on_b()
    slow = [t for t in took if t >= stall_ms / 1000]
    print(f"sends stored on the slow broker: {first} of the first 10 ({[round(t, 2) for t in slow]} s), "
          f"{during} by the end of its 30 s penalty, {after} after it")
    assert not_available_duration(stall_ms) == 30_000
    assert first == 1 and len(slow) == 1  # one slow send (it succeeded), then avoided
    assert during == 1
    assert after == 2  # back in rotation after 30 s, then out again after its next slow send
