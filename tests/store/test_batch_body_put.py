"""A batch stored straight from its wire encoding (BatchPut): the compiled path writes the same
records, byte for byte, as the same messages put as objects; anything off that path goes the
object way inside the store and is stored or refused exactly as the objects would be."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import Message, MessageSysFlag
from lakemq.common.message_batch import encode_messages
from lakemq.common.record import decode_record
from lakemq.errors import MessageIllegalError
from lakemq.store.commit_log import CommitLog
from lakemq.store.put_request import BatchPut, MessagesPut
from lakemq.store.results import PutMessageResult, PutMessageStatus
from tests.store.store_helpers import assert_same_put, open_commit_log_1m, records_but_store_time

TOPIC, QUEUE, BORN, SUFFIX = "BatchTopic", 3, "10.1.2.3:4567", b"CLUSTER\x01c1\x02"
BORN_TS, RECONSUME = 1_700_000_000_123, 0


def _batch(body: bytes, sys_flag: int = 0, topic: str = TOPIC, born: str = BORN, born_ts: int = BORN_TS) -> BatchPut:
    return BatchPut(topic, QUEUE, body, SUFFIX, sys_flag, born_ts, born, RECONSUME)


@pytest.fixture
def commit_logs(tmp_path: Path) -> Iterator[tuple[CommitLog, CommitLog]]:
    fast, slow = open_commit_log_1m(tmp_path / "fast"), open_commit_log_1m(tmp_path / "slow")
    yield fast, slow
    fast.shutdown()
    slow.shutdown()


def _warm(fast: CommitLog, slow: CommitLog) -> None:
    """The first put of a topic and born host goes the object way (it learns both): both logs
    get the same first record."""
    first = encode_messages([Message(TOPIC, b"first", properties={"WAIT": "true"})])
    _put_both(fast, slow, _batch(first + first))
    assert fast.object_path_puts == 1


def _put_both(fast: CommitLog, slow: CommitLog, batch: BatchPut) -> PutMessageResult:
    """``batch`` into ``fast``, its members as objects into ``slow`` (two or more members, so
    both keep the batch rules): the same outcome, the same bytes."""
    result = fast.put(batch)
    try:
        members = batch.messages(slow.store_host)
    except MessageIllegalError as exc:
        assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and result.remark == str(exc)
        assert result.append_result is None
        return result
    assert len(members) > 1
    assert_same_put(fast, slow, result, slow.put(MessagesPut(members)))
    return result


_name = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                max_size=8).filter(lambda k: k not in ("DELAY", "CLUSTER", "WAIT"))
_value = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)
_message = st.builds(lambda body, flag, props: Message(TOPIC, body, flag, props),
                     st.binary(max_size=300), st.integers(-2**31, 2**31 - 1),
                     st.dictionaries(_name, _value, max_size=5))


@settings(deadline=None, max_examples=40)
@given(st.lists(_message, min_size=2, max_size=12))
def test_wire_batch_is_stored_as_the_objects_would_be(tmp_path_factory: pytest.TempPathFactory,
                                                      messages: list[Message]) -> None:
    root = tmp_path_factory.mktemp("batch")
    fast, slow = open_commit_log_1m(root / "fast"), open_commit_log_1m(root / "slow")
    try:
        _warm(fast, slow)
        result = _put_both(fast, slow, _batch(encode_messages(messages)))
        assert result.status is PutMessageStatus.PUT_OK and fast.object_path_puts == 1  # compiled
        assert result.append_result is not None
        assert result.append_result.body_bytes == sum(len(m.body) for m in messages)
        assert decode_record(records_but_store_time(fast)[-1], 0).properties["CLUSTER"] == "c1"
    finally:
        fast.shutdown()
        slow.shutdown()


def _entry(body: bytes, props: bytes, flag: int = 0) -> bytes:
    total = 22 + len(body) + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


@pytest.mark.parametrize("props", [
    b"DELAY\x013\x02",                      # batches are never delayed: the object path refuses
    b"WAIT\x01false\x02",                   # a put that does not wait for the flush
    b"CLUSTER\x01other\x02",                # the suffix's name already there: set, not appended
    b"A\x01x\x02A\x01y\x02",                # a duplicate name: the later wins as a property
    b"A\x01x\x02\x02",                      # an empty pair
    b"A\x02",                               # a name without a value separator
    b"A\x01x\x01y\x02",                     # two separators in one pair
    b"A\x01x",                              # no closing separator
    b"A\x01\xff\xfe\x02",                   # not UTF-8: a malformed batch
])
def test_properties_off_the_plain_form_go_the_object_way(commit_logs: tuple[CommitLog, CommitLog],
                                                         props: bytes) -> None:
    fast, slow = commit_logs
    _warm(fast, slow)
    _put_both(fast, slow, _batch(_entry(b"ok", b"WAIT\x01true\x02") + _entry(b"odd", props)))
    assert fast.object_path_puts == 2


@pytest.mark.parametrize("case", ["truncated", "bad_total", "negative_body", "empty", "unknown_topic",
                                  "unknown_born_host", "transactional", "body_too_big", "born_ts_out_of_int64"])
def test_anything_else_off_the_common_path_goes_the_object_way(commit_logs: tuple[CommitLog, CommitLog],
                                                               case: str) -> None:
    fast, slow = commit_logs
    _warm(fast, slow)
    end = fast.get_max_offset()
    good = _entry(b"ok", b"") * 2
    batch = {
        "truncated": _batch(good + good[:-3]),
        "bad_total": _batch(struct.pack(">i", 5) + good[4:]),
        "negative_body": _batch(good[:16] + struct.pack(">i", -1) + good[20:]),
        "empty": _batch(b""),
        "unknown_topic": _batch(good, topic="OtherTopic"),
        "unknown_born_host": _batch(good, born="10.9.9.9:1"),
        "transactional": _batch(good, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE),
        "body_too_big": _batch(_entry(bytes(fast.config.max_message_size + 1), b"") * 2),
        "born_ts_out_of_int64": _batch(good, born_ts=2**63),
    }[case]
    result = _put_both(fast, slow, batch)
    assert fast.object_path_puts == 2
    stored = case in ("unknown_topic", "unknown_born_host")
    assert (result.status is PutMessageStatus.PUT_OK) is stored
    assert (fast.get_max_offset() > end) is stored
