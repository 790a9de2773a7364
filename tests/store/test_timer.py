"""Timer messages in the store: the put-time rewrite, delivery at the due time (never early),
recall, the checkpoint, and no second delivery after a restart that lost the checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.common.record import decode_record
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from lakemq.store.timer import RecallOutcome, read_timer_checkpoint
from lakemq.store.timer_message import TIMER_TOPIC, rewrite_timer_message
from tests.store.store_helpers import make_msg, open_store, wait_dispatched


def timer_msg(topic: str, body: bytes, uniq: str, **asks: str) -> MessageExtBrokerInner:
    msg = make_msg(topic, body, uniq=uniq, queue_id=1)
    msg.properties.update(asks)
    return msg


def delivered(store: MessageStore, topic: str, queue_id: int = 1) -> list[MessageExtBrokerInner]:
    got = store.get_message("g", topic, queue_id, 0, 64)
    return [decode_record(b) for b in got.buffers]  # type: ignore[misc]


def wait_for(store: MessageStore, topic: str, count: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.get_max_offset_in_queue(topic, 1) < count:
        assert time.monotonic() < deadline, f"{topic}: {store.get_max_offset_in_queue(topic, 1)} of {count} delivered"
        time.sleep(0.02)


def test_rewrite_moves_future_messages_and_refuses_beyond_the_cap() -> None:
    now = 1_800_000_000_000
    msg = timer_msg("T", b"x", "U1", **{MessageConst.TIMER_DELAY_SEC: "5"})
    assert rewrite_timer_message(msg, enabled=True, max_delay_sec=60, now_ms=now) is None
    assert (msg.topic, msg.queue_id) == (TIMER_TOPIC, 0)
    assert msg.properties[MessageConst.TIMER_OUT_MS] == str(now + 5000)
    assert (msg.properties[MessageConst.REAL_TOPIC], msg.properties[MessageConst.REAL_QUEUE_ID]) == ("T", "1")

    past = timer_msg("T", b"x", "U2", **{MessageConst.TIMER_DELIVER_MS: str(now - 1)})
    assert rewrite_timer_message(past, enabled=True, max_delay_sec=60, now_ms=now) is None
    assert past.topic == "T"  # due already: a plain message

    far = timer_msg("T", b"x", "U3", **{MessageConst.TIMER_DELAY_MS: str(61_000)})
    refused = rewrite_timer_message(far, enabled=True, max_delay_sec=60, now_ms=now)
    assert refused is not None and refused.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "timerMaxDelaySec" in refused.remark and far.topic == "T"

    bad = timer_msg("T", b"x", "U4", **{MessageConst.TIMER_DELIVER_MS: "soon"})
    refused = rewrite_timer_message(bad, enabled=True, max_delay_sec=60, now_ms=now)
    assert refused is not None and "bad delivery time" in refused.remark


def test_delivered_at_due_time_not_before(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        due = int(time.time() * 1000) + 1500
        r = store.put(MessagesPut.of(timer_msg("TopicT", b"late", "UA", **{MessageConst.TIMER_DELIVER_MS: str(due)})))
        assert r.is_ok
        wait_dispatched(store)
        assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 1
        assert store.get_max_offset_in_queue("TopicT", 1) == 0
        wait_for(store, "TopicT", 1)
        (msg,) = delivered(store, "TopicT")
        assert msg.store_timestamp >= due and msg.store_timestamp - due < 1000
        assert msg.body == b"late" and msg.unique_key == "UA"
        assert MessageConst.REAL_TOPIC not in msg.properties
        assert msg.properties[MessageConst.TIMER_OUT_MS] == str(due)
    finally:
        store.shutdown()
    cp = read_timer_checkpoint(tmp_path / "config" / "timerCheckpoint.json")
    assert (cp.floor, cp.scanned) == (1, 1) and cp.read_time >= due


def test_recall_before_due_and_after(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        now = int(time.time() * 1000)
        store.put(MessagesPut.of(timer_msg("TopicR", b"gone", "UR1", **{MessageConst.TIMER_DELIVER_MS: str(now + 1500)})))
        store.put(MessagesPut.of(timer_msg("TopicR", b"kept", "UR2", **{MessageConst.TIMER_DELIVER_MS: str(now + 1000)})))
        wait_dispatched(store)
        deadline = time.monotonic() + 5
        while store.timer.waiting < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert store.recall_timer_message("TopicR", "UR1", now + 1501) is RecallOutcome.RECALLED
        assert store.recall_timer_message("TopicR", "UR1", now + 1501) is RecallOutcome.ALREADY_RECALLED
        assert store.recall_timer_message("TopicR", "NOPE", now + 60_000) is RecallOutcome.NOT_FOUND
        wait_for(store, "TopicR", 1)
        assert store.recall_timer_message("TopicR", "UR2", now + 1001) is RecallOutcome.ALREADY_DELIVERED
    finally:
        store.shutdown()
    # Restart after its due time: the marker keeps it recalled.
    deadline = time.time() + 3
    while time.time() * 1000 < now + 1700:
        assert time.time() < deadline
        time.sleep(0.05)
    store = open_store(tmp_path)
    try:
        assert store.timer.waiting == 0
        assert [m.body for m in delivered(store, "TopicR")] == [b"kept"]
    finally:
        store.shutdown()


def test_restart_without_checkpoint_delivers_once(tmp_path: Path) -> None:
    """The checkpoint lost (as after a kill -9 before it was written): the copies found in the
    real topic are not delivered again; the ones not yet due still are."""
    store = open_store(tmp_path)
    now = int(time.time() * 1000)
    try:
        for i in range(5):
            store.put(MessagesPut.of(timer_msg("TopicK", b"e%d" % i, f"UE{i}",
                                               **{MessageConst.TIMER_DELIVER_MS: str(now + 500)})))
        store.put(MessagesPut.of(timer_msg("TopicK", b"later", "UL", **{MessageConst.TIMER_DELIVER_MS: str(now + 3000)})))
        wait_for(store, "TopicK", 5)
    finally:
        store.shutdown()
    (tmp_path / "config" / "timerCheckpoint.json").unlink()
    store = open_store(tmp_path)
    try:
        wait_for(store, "TopicK", 6)
        time.sleep(0.3)  # nothing more may come: a second copy would land right away
        bodies = sorted(m.body for m in delivered(store, "TopicK"))
        assert bodies == [b"e0", b"e1", b"e2", b"e3", b"e4", b"later"]
        (last,) = [m for m in delivered(store, "TopicK") if m.body == b"later"]
        assert last.store_timestamp >= now + 3000
    finally:
        store.shutdown()
