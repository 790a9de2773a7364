"""ScheduleMessageService: due messages re-put to their real topic, offsets persisted, failures
retried, at-least-once across a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.common.record import decode_record
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageResult, PutMessageStatus
from lakemq.store.schedule import DELAY_FOR_A_PERIOD_MS, ScheduleMessageService
from tests.store.store_helpers import make_msg, open_store, wait_dispatched


class Clock:
    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


def manual_service(store: MessageStore, clock: Clock, put=None) -> ScheduleMessageService:  # type: ignore[no-untyped-def]
    svc = ScheduleMessageService(
        store.delay_levels, find_queue=store.consume_queues.find, read_message=store.look_message_by_offset,
        put_message=put or (lambda msg: store.put(MessagesPut.of(msg))), offset_path=store.config.delay_offset_path, now_ms=clock,
    )
    assert svc.load()
    return svc


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_message("g", topic, queue_id, 0, 32)
    return [decode_record(b).body for b in got.buffers]


def test_delayed_message_arrives_after_its_level(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        r = store.put(MessagesPut.of(make_msg("TopicS", b"delayed", queue_id=2, delay=1, keys="dk")))  # level 1: 1 s
        assert r.is_ok
        wait_dispatched(store)
        assert store.get_message("g", "TopicS", 2, 0, 8).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1
        deadline = time.monotonic() + 5
        while store.get_max_offset_in_queue("TopicS", 2) == 0:
            assert time.monotonic() < deadline, "delayed message never delivered"
            time.sleep(0.05)
        elapsed_ms = int(time.time() * 1000) - r.append_result.store_timestamp  # type: ignore[union-attr]
        assert elapsed_ms >= 1000
        got = store.get_message("g", "TopicS", 2, 0, 8)
        (msg,) = [decode_record(b) for b in got.buffers]
        assert msg.body == b"delayed" and MessageConst.DELAY_TIME_LEVEL not in msg.properties
        assert msg.properties[MessageConst.REAL_TOPIC] == "TopicS"
        assert store.schedule.offset_table[1] == 1
    finally:
        store.shutdown()
    table = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert table == {"offsetTable": {"1": 1}}


def test_due_order_failures_and_restart(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.schedule.shutdown()  # driven by hand below, with a fake clock
    clock = Clock()
    try:
        for i in range(3):
            store.put(MessagesPut.of(make_msg("TopicS", b"m%d" % i, delay=2)))  # level 2: 2 s
        wait_dispatched(store)
        svc = manual_service(store, clock)
        assert 0 < svc.deliver_level(2) <= 2000  # nothing due yet: wake when the first is
        assert bodies(store, "TopicS", 0) == []
        clock.now += 2500
        failing = manual_service(store, clock, put=lambda m: PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY))
        assert failing.deliver_level(2) == DELAY_FOR_A_PERIOD_MS
        assert failing.offset_table.get(2, 0) == 0  # not delivered, not skipped
        svc.deliver_level(2)
        wait_dispatched(store)
        assert bodies(store, "TopicS", 0) == [b"m0", b"m1", b"m2"]
        assert svc.offset_table[2] == 3
        # crash before the table was saved: the restart delivers again (at least once)
        restarted = manual_service(store, clock)
        assert restarted.offset_table.get(2, 0) == 0
        restarted.deliver_level(2)
        svc.persist()
        assert manual_service(store, clock).offset_table[2] == 3
        wait_dispatched(store)
        assert len(bodies(store, "TopicS", 0)) == 6
    finally:
        store.shutdown()


def test_clock_step_and_rocketmq_offset_file(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.schedule.shutdown()
    clock = Clock()
    try:
        store.put(MessagesPut.of(make_msg("TopicS", b"stepped", delay=1)))
        wait_dispatched(store)
        clock.now -= 3_600_000  # the clock went back an hour: due time is beyond now + 1 s
        svc = manual_service(store, clock)
        svc.deliver_level(1)
        wait_dispatched(store)
        assert bodies(store, "TopicS", 0) == [b"stepped"]
        # RocketMQ writes the table with fastjson's bare integer keys
        store.config.delay_offset_path.write_text('{"offsetTable":{1:7,2:0,99:5}}')
        assert svc.load() and svc.offset_table == {1: 7, 2: 0}
        store.config.delay_offset_path.write_text("not json")
        assert not svc.load()
    finally:
        store.shutdown()


def test_restore_keeps_message_fields(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.schedule.shutdown()
    clock = Clock()
    seen: list[MessageExtBrokerInner] = []
    try:
        msg = make_msg("TopicS", b"fields", queue_id=3, delay=1, tags="TagA", keys="a b")
        msg.reconsume_times = 2
        store.put(MessagesPut.of(msg))
        wait_dispatched(store)
        clock.now += 5000

        def capture(m: MessageExtBrokerInner) -> PutMessageResult:
            seen.append(m)
            return store.put(MessagesPut.of(m))

        manual_service(store, clock, put=capture).deliver_level(1)
        (inner,) = seen
        assert (inner.topic, inner.queue_id, inner.reconsume_times) == ("TopicS", 3, 2)
        assert inner.tags == "TagA" and inner.keys == ["a", "b"] and inner.delay_time_level == 0
        assert inner.tags_code == msg.tags_code
    finally:
        store.shutdown()
