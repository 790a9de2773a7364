"""kill -9 of a broker at each step of POP consumption, through RocketMQ 5's remoting codes:
after an ack, after a change of invisible time, after a pop before its ack, and while the
revive service copies expired deliveries to the retry topic. After every restart nothing
acked comes back and every unacked message is delivered again, with its attempt raised.

Runs under SYNC_FLUSH and ASYNC_FLUSH: the journal is the CommitLog's revive topic, as
durable as any message (a kill -9 keeps the page cache, so ASYNC_FLUSH loses nothing here)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import SyncRemotingClient
from lakemq.remoting.headers import (
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    decode_header,
)
from tests.broker.pop_wire import Popped, ack_request, change_request, changed_handle, pop_request, popped
from tests.broker.wire import request, send_request
from tests.cluster import Cluster, start_cluster

pytestmark = pytest.mark.slow

G, TOPIC = "KillPopGroup", "KillPopT"
RETRY = f"%RETRY%{G}_{TOPIC}"


@pytest.fixture(params=["SYNC_FLUSH", "ASYNC_FLUSH"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, broker_conf={"flushDiskType": request.param}) as running:
        yield running


class _Consumer:
    def __init__(self, cluster: Cluster, client: SyncRemotingClient) -> None:
        self.cluster, self.client = cluster, client
        self.acked: set[bytes] = set()

    def invoke(self, command: object) -> object:
        return self.client.invoke(self.cluster.broker_addr(), command, 30)  # type: ignore[arg-type]

    def pop(self, **kw: object) -> list[Popped]:
        got = popped(self.invoke(pop_request(G, TOPIC, **kw)), "broker-a")  # type: ignore[arg-type]
        back = [m.body for m in got if m.body in self.acked]
        assert not back, f"acked messages came back: {back}"
        return got

    def ack(self, message: Popped) -> None:
        answer = self.invoke(ack_request(G, TOPIC, message))
        assert answer.code == ResponseCode.SUCCESS, answer.remark  # type: ignore[attr-defined]
        self.acked.add(message.body)

    def collect(self, wanted: set[bytes], *, within_s: float = 60.0, **kw: object) -> dict[bytes, Popped]:
        """Pop until every body in ``wanted`` was delivered (bounded)."""
        got: dict[bytes, Popped] = {}
        deadline = time.monotonic() + within_s
        while not wanted <= got.keys():
            assert time.monotonic() < deadline, f"never delivered again: {sorted(wanted - got.keys())}"
            for m in self.pop(poll_ms=5000, **kw):
                got[m.body] = m
        return got

    def kill_and_restart(self) -> None:
        self.cluster.kill_broker()
        self.cluster.start_broker()

    def max_offset(self, topic: str) -> int:
        answer = self.invoke(request(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, 0)))
        return decode_header(OffsetResponseHeader, answer.ext_fields).offset  # type: ignore[attr-defined]


def test_pop_state_survives_kill_9_at_each_step(cluster: Cluster) -> None:
    with SyncRemotingClient() as client:
        c = _Consumer(cluster, client)
        created = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                   CreateTopicRequestHeader(TOPIC, "TBW102", 1, 1, 6, "SINGLE_TAG")))
        assert created.code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
        bodies = [f"m{i}".encode() for i in range(6)]
        for body in bodies:
            assert c.invoke(send_request(TOPIC, body)).code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
        # A send's answer does not wait for its ConsumeQueue entry: pop once all six are queued.
        deadline = time.monotonic() + 15
        while c.max_offset(TOPIC) < len(bodies):
            assert time.monotonic() < deadline, "the sends never reached the ConsumeQueue"
            time.sleep(0.05)

        first = {m.body: m for m in c.pop(invisible_ms=60_000)}  # hidden longer than any restart takes
        assert sorted(first) == bodies and {m.attempt for m in first.values()} == {1}
        c.ack(first[b"m0"])
        c.ack(first[b"m1"])
        c.kill_and_restart()  # after an ack

        def change(m: Popped, invisible_ms: int) -> Popped:
            answer = c.invoke(change_request(G, TOPIC, m, invisible_ms))
            return Popped(m.message, changed_handle(answer, m), m.attempt)  # type: ignore[arg-type]

        renewed = change(first[b"m2"], 600_000)
        for body in (b"m3", b"m4", b"m5"):
            change(first[body], 1000)  # due soon
        c.kill_and_restart()  # after a change of invisible time

        again = c.collect({b"m3", b"m4", b"m5"}, invisible_ms=10_000)  # m2 stays hidden: its new deadline
        assert b"m2" not in again and {m.attempt for m in again.values()} == {2}
        c.ack(again[b"m3"])
        c.kill_and_restart()  # after a pop (m4, m5 delivered a second time) before its ack

        c.ack(renewed)  # the handle the change gave survived two kills
        third = c.collect({b"m4", b"m5"}, invisible_ms=60_000)
        assert {m.attempt for m in third.values()} == {3}
        for m in third.values():
            c.ack(m)

        # Many deliveries expire at once; the broker is killed as soon as their revival began.
        many = [f"r{i}".encode() for i in range(300)]
        for body in many:
            assert c.invoke(send_request(TOPIC, body)).code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
        hidden = c.collect(set(many), invisible_ms=1500)
        assert {m.attempt for m in hidden.values()} == {1}
        deadline = time.monotonic() + 30
        while c.max_offset(RETRY) < 3 + 1:  # the earlier revivals put 3 copies; wait for the next
            assert time.monotonic() < deadline, "revive never started"
        c.kill_and_restart()  # during revive

        back = c.collect(set(many), invisible_ms=60_000)
        assert {m.attempt for m in back.values()} == {2}
        for m in back.values():
            c.ack(m)
        # A revive the kill cut short was settled from the copies it had made: none twice.
        assert c.pop(poll_ms=3000) == []
        assert c.acked == set(bodies) | set(many)


def test_fifo_pop_state_survives_kill_9(cluster: Cluster) -> None:
    """A FIFO queue stays held across a kill -9 until its delivery expires or is acked, and an
    expired delivery comes back in place with its attempt raised."""
    with SyncRemotingClient() as client:
        c = _Consumer(cluster, client)
        created = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                   CreateTopicRequestHeader(TOPIC, "TBW102", 1, 1, 6, "SINGLE_TAG")))
        assert created.code == ResponseCode.SUCCESS  # type: ignore[attr-defined]
        for body in (b"f0", b"f1", b"f2"):
            assert c.invoke(send_request(TOPIC, body)).code == ResponseCode.SUCCESS  # type: ignore[attr-defined]

        def pop_fifo(max_nums: int = 8, **kw: object) -> list[Popped]:
            response = c.invoke(pop_request(G, TOPIC, order=True, max_nums=max_nums, **kw))  # type: ignore[arg-type]
            return popped(response, "broker-a", order=True)  # type: ignore[arg-type]

        invisible_s = 6.0
        # Long polling: a send's answer does not wait for the ConsumeQueue entry (as in RocketMQ).
        [f0] = pop_fifo(1, invisible_ms=int(invisible_s * 1000), poll_ms=5000)
        hidden_until = time.monotonic() + invisible_s
        assert (f0.body, f0.attempt) == (b"f0", 1)
        c.kill_and_restart()  # a FIFO delivery in flight
        early = pop_fifo()
        if time.monotonic() < hidden_until - 0.5:  # asked while f0 was surely still hidden
            assert early == [], "f1 delivered before f0 was acked or expired"
        again = early
        deadline = time.monotonic() + 60
        while not again:
            assert time.monotonic() < deadline, "f0 never delivered again"
            again = pop_fifo(poll_ms=5000, invisible_ms=60_000)
        assert [(m.body, m.attempt) for m in again] == [(b"f0", 2)]
        c.ack(again[0])
        c.kill_and_restart()  # after the ack
        rest = pop_fifo(poll_ms=5000)
        assert [(m.body, m.attempt) for m in rest] == [(b"f1", 1), (b"f2", 1)]
