"""The broker's wall clock stepped back an hour, then forward two, then back again, with a
kill -9 after the first step and another across the last: store timestamps go back and forth,
and nothing breaks.

The broker runs with tests/faults/stepped_clock on PYTHONPATH (a sitecustomize that adds the
offset in a file to time.time/time_ns and leaves the monotonic clock alone, as a real step
does); the test process and the NameServer keep the true time. Checked: every message stored
once, intact, in send order per queue (the ConsumeQueue); recovery after kill -9 loses
nothing; the index finds every key over the whole time range, and a time window finds every
message of a phase whose clock did not stand behind the index file it went into; delayed
messages are never held past their level's delay (RocketMQ's rule: a due time further than
the delay ahead comes from a step back and is due now; after a step forward what the clock
says is due goes out), and those no step crossed arrive on time; a push consumer gets every
message and the broker expires no client on the step forward.

Limit, measured and printed: an index entry keeps whole seconds after its file's begin
timestamp, clamped at 0 (RocketMQ's layout), so a message stored while the clock stood behind
that begin (phases b and d here) is indexed at the begin: a key query over all time finds it,
a narrow window around its own store time may not."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
)
from lakemq.client.admin import Admin
from tests.cluster import start_cluster

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow

TOPIC = "ClockStep"
PER_PHASE = 120
HOUR = 3_600_000
STEPPED_CLOCK = Path(__file__).resolve().parent / "stepped_clock"
# Small CommitLog and index files, so both roll inside every phase; client housekeeping often,
# so a forward step's "silent for an hour" clients are seen.
CONF = {
    "mappedFileSizeCommitLog": str(32 << 10),
    "maxHashSlotNum": "64",
    "maxIndexNum": "160",
    "clientHousekeepingInterval": "1000",
    "flushDelayOffsetInterval": "500",
}
DELAY_S = {1: 1.0, 2: 5.0}  # messageDelayLevel "1s 5s ..."


def _wait_delay_offsets_saved(store: Path, at_least: dict[int, int], timeout: float = 15.0) -> None:
    """Until the broker's saved delay offsets (config/delayOffset.json, level -> next offset)
    reach ``at_least``: a kill -9 after that only repeats what came later."""
    path = store / "config" / "delayOffset.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            table = {int(k): int(v) for k, v in json.loads(path.read_text()).get("offsetTable", {}).items()}
        except (OSError, ValueError):  # not written yet, or caught mid-write
            table = {}
        if all(table.get(level, 0) >= n for level, n in at_least.items()):
            return
        assert time.monotonic() < deadline, f"delay offsets saved {table}, expected at least {at_least}"
        time.sleep(0.05)


def _body(key: str) -> bytes:
    return f"{key}:".encode() * 8


class _Run:
    def __init__(self, clock: Path, producer: SyncProducer, reader: SyncPullConsumer) -> None:
        self.clock, self.producer, self.reader = clock, producer, reader
        self.delayed_sent: dict[str, tuple[int, float]] = {}  # key -> (level, monotonic send time)

    def step(self, offset_ms: int) -> None:
        tmp = self.clock.with_suffix(".tmp")
        tmp.write_text(str(offset_ms))
        os.replace(tmp, self.clock)
        time.sleep(0.1)  # the broker re-reads the file every 20 ms

    def send_phase(self, phase: str) -> None:
        for i in range(PER_PHASE):
            key = f"{phase}-{i}"
            msg = Message(TOPIC, _body(key))
            msg.keys = [key]
            self.producer.send(msg)

    def send_delayed(self, key: str, level: int) -> None:
        msg = Message(TOPIC, _body(key))
        msg.keys = [key]
        msg.delay_time_level = level
        self.delayed_sent[key] = (level, time.monotonic())  # before the send: the delay counts from the store
        self.producer.send(msg)

    def read_all(self) -> list[MessageExt]:
        found: list[MessageExt] = []
        for mq in sorted(self.reader.fetch_subscribe_message_queues(TOPIC), key=lambda q: q.queue_id):
            offset, end = self.reader.min_offset(mq), self.reader.max_offset(mq)
            while offset < end:
                result = self.reader.pull(mq, "*", offset, 32)
                found += result.msgs
                offset = result.next_begin_offset
        return found

    def wait_delivered(self, keys: set[str], timeout: float = 15.0) -> dict[str, float]:
        """Seconds from each delayed send to its arrival in the real topic (0.1 s polls)."""
        arrived: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while set(arrived) != keys and time.monotonic() < deadline:
            found = self.read_all()
            now = time.monotonic()  # after the read: a message seen in it arrived no later than this
            for msg in found:
                (key,) = msg.keys
                if key in keys and key not in arrived:
                    arrived[key] = now - self.delayed_sent[key][1]
            time.sleep(0.1)
        assert set(arrived) == keys, f"delayed messages never delivered: {sorted(keys - set(arrived))}"
        return arrived


def test_clock_steps_break_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = tmp_path / "clock"
    clock.write_text("0")
    with start_cluster(tmp_path, brokers=()) as cluster:  # the NameServer keeps the true time
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STEPPED_CLOCK),
                                                                     os.environ.get("PYTHONPATH")])))
        monkeypatch.setenv("LAKEMQ_TEST_CLOCK_FILE", str(clock))
        cluster.add_broker("broker-a", CONF)
        ns, store = cluster.namesrv_addr, tmp_path / "broker-a" / "store"
        with SyncProducer("ClockStepProducer", namesrv_addr=ns) as producer, \
                SyncPullConsumer("ClockStepReader", namesrv_addr=ns) as reader:
            producer.create_topic(TOPIC, 2)
            pushed, consumer = _push_consumer(ns)
            run = _Run(clock, producer, reader)
            run.send_phase("a")
            run.send_delayed("a-delay", 2)
            run.step(-HOUR)
            run.send_phase("b")
            latency = run.wait_delivered({"a-delay"})
            _wait_delay_offsets_saved(store, {2: 1})
            cluster.kill_broker()
            cluster.start_broker()  # recovery with the clock an hour behind the checkpoint
            run.send_delayed("b-delay", 1)
            run.send_delayed("b-later", 2)
            run.step(+HOUR)
            run.send_phase("c")
            run.send_delayed("c-delay", 1)
            latency |= run.wait_delivered({"b-delay", "b-later", "c-delay"})
            _wait_delay_offsets_saved(store, {1: 2, 2: 2})
            cluster.kill_broker()
            run.step(0)  # back an hour again: the broker restarts behind its newest timestamps
            cluster.start_broker()
            run.send_phase("d")
            run.send_delayed("d-delay", 1)
            latency |= run.wait_delivered({"d-delay"})
            stored = run.read_all()
            deadline = time.monotonic() + 15
            while len(pushed) < len(stored) and time.monotonic() < deadline:
                time.sleep(0.1)
            consumer.shutdown()
        broker_log = cluster.brokers["broker-a"].logs(tail=10_000)

        phases = "abcd"
        expected = {f"{p}-{i}" for p in phases for i in range(PER_PHASE)} | set(latency)
        counts = Counter(k for m in stored for k in m.keys)
        stamps = {p: statistics.median(m.store_timestamp for m in stored if m.keys[0].startswith(f"{p}-"))
                  for p in phases}
        found_all, windows = asyncio.run(_query_index(ns, stored, expected))
        shift = {p: f"{(stamps[p] - stamps['a']) / HOUR:+.2f} h" for p in "bcd"}
        arrivals = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(latency.items()))
        in_window = ", ".join(f"{p} {n}/{PER_PHASE}" for p, n in windows.items())
        print(f"injected: broker clock stepped -1 h (then kill -9), +2 h, then -1 h across a kill -9; "
              f"measured: median "
              f"store time vs phase a {shift}; {len(stored)} stored ({len(expected)} sent); delayed "
              f"arrival after send: {arrivals}; index: {found_all} of {len(expected)} keys found over all "
              f"time, within each phase's window {in_window}")

        assert stamps["b"] < stamps["a"] - 0.9 * HOUR < stamps["a"] + 0.9 * HOUR < stamps["c"], "no step"
        twice = {k: n for k, n in counts.items() if n > 1}
        assert counts == Counter(expected), f"twice: {twice}, lost: {sorted(expected - set(counts))}"
        assert all(m.body == _body(m.keys[0]) for m in stored)
        for queue_id in (0, 1):  # the ConsumeQueue keeps CommitLog order, whatever the timestamps
            order = [k for m in stored if m.queue_id == queue_id and (k := m.keys[0])[2:].isdigit()]
            assert order == sorted(order, key=lambda k: (k[0], int(k[2:])))
        for key, seconds in latency.items():
            level = run.delayed_sent[key][0]
            assert seconds <= DELAY_S[level] + 3.0, f"{key} (level {level}) held {seconds:.1f} s"
        assert latency["c-delay"] >= 0.9 and latency["d-delay"] >= 0.9, "delivered before its delay"
        assert found_all == len(expected), "the index lost a key"
        # Client ages count monotonic time: a step forward expires no one.
        expired = [line for line in broker_log.splitlines() if "_manager - " in line and "expired" in line]
        assert not expired, expired
        assert pushed == set(expected), f"the push consumer missed {sorted(set(expected) - pushed)[:5]}"
        assert windows["a"] == PER_PHASE and windows["c"] == PER_PHASE


def _push_consumer(ns: str) -> tuple[set[str], SyncPushConsumer]:
    pushed: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        with lock:
            pushed.update(m.keys[0] for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = SyncPushConsumer("ClockStepGroup", config=ConsumerConfig(
        consumer_group="ClockStepGroup", consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
        namesrv_addr=ns)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener_concurrently(listener)
    consumer.start()
    return pushed, consumer


async def _query_index(ns: str, stored: list[MessageExt], keys: set[str]) -> tuple[int, dict[str, int]]:
    """How many keys the index finds (exactly once, intact) over all time, and per phase within
    that phase's store-time window."""
    by_key = {m.keys[0]: m for m in stored}
    async with Admin(ns) as admin:
        found_all = 0
        for key in sorted(keys):
            hits = await admin.query_message(TOPIC, key)
            found_all += len(hits) == 1 and hits[0].body == _body(key)
        windows: dict[str, int] = {}
        for phase in "abcd":
            own = [m for k, m in by_key.items() if k.startswith(f"{phase}-") and k[2:].isdigit()]
            begin, end = min(m.store_timestamp for m in own), max(m.store_timestamp for m in own)
            windows[phase] = 0
            for m in own:
                hits = await admin.query_message(TOPIC, m.keys[0], begin_ms=begin, end_ms=end)
                windows[phase] += any(h.keys == m.keys and h.body == m.body for h in hits)
    return found_all, windows
