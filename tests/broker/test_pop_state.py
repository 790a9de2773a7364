"""The POP state's journal records, snapshot round trip and receipt handle text, without a broker."""

from __future__ import annotations

import pytest

from lakemq.broker.pop.receipt import ReceiptHandle, pop_retry_topic
from lakemq.broker.pop.state import PopState
from lakemq.errors import CorruptFileError, ReceiptHandleError

KEY = ("g", "T", 0)


def _popped(state: PopState, pop_time: int = 1000, fifo: bool = False) -> None:
    state.apply({"k": "pop", "g": "g", "p": pop_time, "i": 500, "f": fifo,
                 "c": [["T", 0, 3, [[0, 100, 1], [1, 200, 1], [2, 300, 2]]]]})


def test_records_change_the_state_and_a_snapshot_keeps_it() -> None:
    state = PopState()
    _popped(state)
    qs = state.queue(KEY)
    assert qs is not None and qs.next == 3 and sorted(qs.inflight) == [0, 1, 2] and qs.floor() == 0
    state.apply({"k": "done", "g": "g", "t": "T", "q": 0, "o": [0], "r": "ack"})
    state.apply({"k": "chg", "g": "g", "t": "T", "q": 0, "o": 1, "p": 5000, "i": 10_000})
    assert qs.floor() == 1
    # Due at 1500: offset 2 only (offset 1's deadline moved to 15000, its old entry is stale).
    assert [(key, offset) for key, offset, _e in state.due(1500, 10)] == [(KEY, 2)]
    assert state.due(1500, 10) == []  # given out once
    copy = PopState.decode(state.encode())
    assert copy.encode() == state.encode()
    assert [(o, e.deadline, e.attempt) for o, e in sorted(copy.queues[KEY].inflight.items())] == \
        [(1, 15_000, 1), (2, 1500, 2)]


def test_fifo_deliveries_hold_their_queue_and_are_never_revived() -> None:
    state = PopState()
    _popped(state, fifo=True)
    qs = state.queue(KEY)
    assert qs is not None and qs.blocked_fifo(1499) and not qs.blocked_fifo(1500)
    assert qs.expired_fifo(1500) == [0, 1, 2]
    assert state.due(10_000, 10) == []


def test_an_unfinished_revive_is_kept_until_its_end() -> None:
    state = PopState()
    state.apply({"k": "rev", "x": 7, "m": {"%RETRY%g_T": 4}})
    assert 7 in state.reviving
    state.apply({"k": "end", "x": 7})
    assert state.reviving == {}


def test_a_malformed_record_is_refused() -> None:
    with pytest.raises(CorruptFileError):
        PopState().apply({"k": "pop", "g": "g"})
    with pytest.raises(CorruptFileError):
        PopState().apply({"k": "what", "g": "g"})


def test_receipt_handles_are_rocketmq_5_extra_info() -> None:
    handle = ReceiptHandle(5, 1700000000000, 30000, 0, True, "broker-a", 0, 7)
    assert handle.encode() == "5 1700000000000 30000 0 1 broker-a 0 7"
    assert ReceiptHandle.parse(handle.encode()) == handle
    assert ReceiptHandle.parse("5 1700000000000 30000 0 1 broker-a 0", offset=7) == handle  # a check point's
    assert handle.real_topic("g", "T") == pop_retry_topic("g", "T") == "%RETRY%g_T"
    assert handle.deadline == 1700000030000 and not handle.fifo
    for bad in ("", "1 2 3", "a b c d e f g h", "5 1700000000000 30000 0 1 broker-a 0"):
        with pytest.raises(ReceiptHandleError):
            ReceiptHandle.parse(bad)
