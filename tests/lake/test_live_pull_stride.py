"""The ``lakemq`` source's read tasks against a real NameServer and broker on loopback (no
Spark): a queue range's pulls start pipelined at the stride the broker's full answers showed
for an earlier range in the same process, an answer cut short by its range's end teaches
nothing, a stride is kept per tag expression, a task asks for each of its ranges before it
hands over the first one's rows, and the rows are every message once either way. And a read
freezes what its Python worker imported, which PySpark's garbage collection after every task
would scan again."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, InputPartition

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.errors import RemotingConnectError
from lakemq.jobs import live_source
from lakemq.jobs.live_plan import HotSpan
from lakemq.jobs.live_source import HotPart, LiveReader
from tests.cluster import Cluster, start_cluster

pytestmark = pytest.mark.slow

BROKER = "broker-a"
TOPIC = "stride_orders"
SENT = 200
CAP = 32  # messages in a pull's answer: the broker's maxTransferCountOnMessageInMemory, RocketMQ's default


async def _produce(namesrv: str) -> None:
    await create_routed_topic(namesrv, TOPIC, queue_nums=1)
    async with Producer("stride_producer", namesrv_addr=namesrv) as producer:
        for i in range(SENT):
            msg = Message(TOPIC, b"order-%d" % i)
            msg.tags = "paid" if i % 2 == 0 else "new"
            await producer.send(msg)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("stride"), brokers=(BROKER,)) as running:
        asyncio.run(_produce(running.namesrv_addr))
        yield running


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(offset, stride) of each pull chain the reader starts, in a process that has seen no
    broker's answers yet."""
    calls: list[tuple[int, int]] = []
    real = live_source.pull_chain

    def spy(consumer: Any, mq: Any, subscription: str, offset: int, end: int, stride: int) -> Any:
        calls.append((offset, stride))
        return real(consumer, mq, subscription, offset, end, stride)

    monkeypatch.setattr(live_source, "pull_chain", spy)
    monkeypatch.setattr(live_source, "_strides", {})
    return calls


def _span(cluster: Cluster, tmp_path: Path) -> tuple[LiveReader, HotSpan]:
    reader = LiveReader({"namesrv": cluster.namesrv_addr, "lake": str(tmp_path / "lake"), "topic": TOPIC})
    (part,) = reader.partitions()  # one queue, nothing in the lake
    assert isinstance(part, HotPart) and (part.spans[0].start, part.spans[0].end) == (0, SENT)
    return reader, part.spans[0]


def _bodies(reader: LiveReader, *spans: HotSpan) -> list[bytes]:
    return [b for s in spans for batch in reader.read(HotPart((s,))) for b in batch.column("body").to_pylist()]


def test_a_later_range_starts_its_pulls_at_the_stride_an_earlier_one_showed(
        cluster: Cluster, tmp_path: Path, asked: list[tuple[int, int]]) -> None:
    reader, span = _span(cluster, tmp_path)
    # 100 offsets: one pull alone answers CAP and teaches the stride, then CAP, CAP and the 4
    # the range's end leaves (which must not teach a stride of 4).
    first, second = replace(span, end=100), replace(span, start=100)
    assert _bodies(reader, first, second) == [b"order-%d" % i for i in range(SENT)]
    assert asked[:2] == [(0, 0), (CAP, CAP)]
    assert (100, CAP) in asked  # the second range's first pulls went out pipelined
    assert live_source._strides == {(BROKER, "*"): CAP}


def test_an_answer_cut_short_by_its_range_teaches_no_stride(
        cluster: Cluster, tmp_path: Path, asked: list[tuple[int, int]]) -> None:
    reader, span = _span(cluster, tmp_path)
    short, rest = replace(span, end=20), replace(span, start=20, end=60)
    assert _bodies(reader, short, rest) == [b"order-%d" % i for i in range(60)]
    assert asked[:2] == [(0, 0), (20, 0)]  # the 20-message answer said nothing of the cap
    assert live_source._strides == {(BROKER, "*"): CAP}  # the second range's first answer did


def test_a_stride_is_kept_per_tag_expression(cluster: Cluster, tmp_path: Path, asked: list[tuple[int, int]]) -> None:
    tagged, span = _span(cluster, tmp_path)
    assert list(tagged.pushFilters([EqualTo(("tags",), "paid")])) == []  # the pulls filter by tag
    assert _bodies(tagged, replace(span, end=150)) == [b"order-%d" % i for i in range(0, 150, 2)]
    assert live_source._strides[BROKER, "paid"] == 2 * CAP  # CAP matches among twice the offsets
    plain, _ = _span(cluster, tmp_path)
    assert _bodies(plain, replace(span, start=150)) == [b"order-%d" % i for i in range(150, SENT)]
    assert (150, 0) in asked  # learned afresh: the tagged read's stride is not this one's
    assert live_source._strides == {(BROKER, "paid"): 2 * CAP, (BROKER, "*"): CAP}


def test_a_tasks_later_ranges_are_asked_before_its_first_rows_are_handed_over(
        cluster: Cluster, tmp_path: Path, asked: list[tuple[int, int]]) -> None:
    reader, span = _span(cluster, tmp_path)
    first, second = replace(span, end=100), replace(span, start=100)
    rows = reader.read(HotPart((first, second)))  # one task, two queue ranges
    handed = next(rows).column("body").to_pylist()
    assert handed[0] == b"order-0"
    assert (100, 0) in asked  # the second range's first pull is out already
    handed += [b for batch in rows for b in batch.column("body").to_pylist()]
    assert handed == [b"order-%d" % i for i in range(SENT)]


def test_ranges_asked_ahead_on_a_client_a_failure_dropped_are_asked_again(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The broker refuses the task's first pulls (it restarts): the first range's failure drops
    # the process's client, which the second range's pulls had been asked on. That range asks
    # again on the new client, with no second wait and no call on the dropped one.
    reader, span = _span(cluster, tmp_path)
    reader.wait_s = 10.0  # a stream's brokerWaitMs
    refusals = 2  # the first pulls of both ranges, asked at once
    real = live_source.pull_chain

    def restarting(*args: Any) -> Any:
        nonlocal refusals
        if refusals:
            refusals -= 1
            return _refused()
        return real(*args)

    dropped: list[Any] = []
    drop = live_source.drop_client
    monkeypatch.setattr(live_source, "pull_chain", restarting)
    monkeypatch.setattr(live_source, "drop_client", lambda namesrv, client: dropped.append(client) or drop(namesrv, client))
    first, second = replace(span, end=100), replace(span, start=100)
    rows = [b for batch in reader.read(HotPart((first, second))) for b in batch.column("body").to_pylist()]
    assert rows == [b"order-%d" % i for i in range(SENT)]
    assert len(dropped) == 1  # one failure waited out (and its client dropped), not two


async def _refused() -> Any:
    raise RemotingConnectError("connect to the broker failed: [Errno 111] Connection refused")


def test_a_read_freezes_what_its_worker_imported(tmp_path: Path) -> None:
    gc.unfreeze()
    live_source._freeze_imported.cache_clear()
    try:
        assert gc.get_freeze_count() == 0
        reader = LiveReader({"namesrv": "127.0.0.1:1", "lake": str(tmp_path)})
        assert list(reader.read(InputPartition(None))) == []
        assert gc.get_freeze_count() > 10_000  # pyspark's, pyarrow's and lakemq's objects
    finally:
        gc.unfreeze()
        live_source._freeze_imported.cache_clear()
