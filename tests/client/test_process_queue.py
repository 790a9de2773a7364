from lakemq.client.process_queue import ProcessQueue
from lakemq.common.message import MessageExt


def msgs(*offsets: int, size: int = 10) -> list[MessageExt]:
    return [MessageExt("T", b"x" * size, queue_offset=o) for o in offsets]


def test_commit_offset_is_min_in_flight() -> None:
    pq = ProcessQueue()
    batch = msgs(5, 6, 7, 8)
    assert pq.put_messages(batch) == 4
    assert pq.put_messages(msgs(7, 8)) == 0  # duplicates of a re-pull are not cached twice
    assert pq.msg_count == 4 and pq.msg_size == 40 and pq.max_span() == 3
    assert pq.remove_messages([batch[1], batch[2]]) == 5  # 5 still in flight
    assert pq.remove_messages([batch[0]]) == 8
    assert pq.remove_messages([batch[3]]) == 9  # nothing in flight: one past the max seen
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert ProcessQueue().remove_messages(batch) == -1


def test_flow_control_thresholds() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(*range(11)))
    assert not pq.flow_control(max_count=11, max_size_mib=1, max_span=10)
    fc = pq.flow_control(max_count=10, max_size_mib=1, max_span=9)
    assert fc and fc.count and fc.span and not fc.size
    big = ProcessQueue()
    big.put_messages(msgs(0, size=2 * 1024 * 1024))
    assert big.flow_control(max_count=1000, max_size_mib=1, max_span=None).size
    assert not big.flow_control(max_count=1000, max_size_mib=2, max_span=None)


def test_orderly_take_commit_and_retry() -> None:
    pq = ProcessQueue()
    pq.put_messages(msgs(3, 1, 2, 4))
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [1, 2]
    assert pq.committable_offset() == 1
    pq.make_message_to_consume_again(first)  # SUSPEND_CURRENT_QUEUE_A_MOMENT: same ones again
    again = pq.take_messages(2)
    assert [m.queue_offset for m in again] == [1, 2]
    assert pq.commit() == 3
    assert [m.queue_offset for m in pq.take_messages(10)] == [3, 4]
    assert pq.commit() == 5 and pq.commit() == -1
    assert not pq.has_pending() and pq.msg_size == 0


def test_lock_and_pull_expiry() -> None:
    pq = ProcessQueue()
    pq.last_lock_timestamp = 1000.0
    assert not pq.is_lock_expired(31_000.0) and pq.is_lock_expired(31_001.0)
    pq.last_pull_timestamp = 0.0
    assert not pq.is_pull_expired(120_000.0) and pq.is_pull_expired(120_001.0)
