"""One message stored from a send request's parts (PlainPut): the compiled path writes the
same record, byte for byte, as the message put as an object; anything off that path goes the
object way inside the store and is stored (or refused) exactly as the object would be."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import MessageSysFlag
from lakemq.common.record import decode_record
from lakemq.store.commit_log import CommitLog
from lakemq.store.put_request import MessagesPut, PlainPut
from lakemq.store.results import PutMessageResult, PutMessageStatus
from tests.store.store_helpers import assert_same_put, open_commit_log_1m, records_but_store_time

TOPIC, QUEUE, BORN, SUFFIX = "PlainTopic", 2, "10.1.2.3:4567", b"CLUSTER\x01c1\x02"
BORN_TS = 1_700_000_000_123


def _plain(body: bytes, text: str, *, flag: int = 0, sys_flag: int = 0, reconsume: int = 0, topic: str = TOPIC,
           born: str = BORN) -> PlainPut:
    return PlainPut(topic, QUEUE, body, text, flag, sys_flag, BORN_TS, born, reconsume, SUFFIX)


def _same(fast: CommitLog, slow: CommitLog, put: PlainPut) -> PutMessageResult:
    """``put`` into ``fast`` and its message objects into ``slow``: the same outcome and bytes."""
    result = fast.put(put)
    assert_same_put(fast, slow, result, slow.put(MessagesPut(put.messages(slow.store_host))))
    return result


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[CommitLog, CommitLog]]:
    """Two logs that have seen TOPIC and BORN (the first put of each goes the object way)."""
    fast, slow = open_commit_log_1m(tmp_path / "fast"), open_commit_log_1m(tmp_path / "slow")
    _same(fast, slow, _plain(b"first", "WAIT\x01true\x02"))
    assert fast.object_path_puts == 1
    yield fast, slow
    fast.shutdown()
    slow.shutdown()


_name = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                max_size=8).filter(lambda k: k not in ("DELAY", "CLUSTER", "WAIT", "TRAN_MSG"))
_value = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.tuples(st.binary(max_size=300), st.integers(-2**31, 2**31 - 1),
                          st.dictionaries(_name, _value, max_size=5), st.integers(0, 16)), min_size=1, max_size=6))
def test_plain_put_stores_what_the_object_put_stores(tmp_path_factory: pytest.TempPathFactory,
                                                     messages: list[tuple[bytes, int, dict[str, str], int]]) -> None:
    root = tmp_path_factory.mktemp("plain")
    fast, slow = open_commit_log_1m(root / "fast"), open_commit_log_1m(root / "slow")
    try:
        _same(fast, slow, _plain(b"first", ""))
        for body, flag, props, reconsume in messages:
            text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
            result = _same(fast, slow, _plain(body, text, flag=flag, reconsume=reconsume))
            assert result.status is PutMessageStatus.PUT_OK
        assert fast.object_path_puts == 1  # only the first: every later one was compiled
        assert decode_record(records_but_store_time(fast)[-1], 0).properties["CLUSTER"] == "c1"
    finally:
        fast.shutdown()
        slow.shutdown()


@pytest.mark.parametrize("text", [
    "DELAY\x013\x02",                       # delayed: the store rewrites it to SCHEDULE_TOPIC_XXXX
    "TRAN_MSG\x01true\x02",                 # a transaction's half: the broker sends those as objects
    "WAIT\x01false\x02",                    # a put that does not wait for the flush
    "CLUSTER\x01other\x02",                 # the suffix's name already there: set, not appended
    "A\x01x\x02A\x01y\x02",                 # a duplicate name
    "A\x01x\x02\x02",                       # an empty pair
    "A\x02",                                # a name without a value separator
    "A\x01x",                               # no closing separator
])
def test_properties_off_the_plain_form_go_the_object_way(logs: tuple[CommitLog, CommitLog], text: str) -> None:
    fast, slow = logs
    _same(fast, slow, _plain(b"odd", text))
    assert fast.object_path_puts == 2


@pytest.mark.parametrize("case", ["unknown_topic", "unknown_born_host", "prepared", "unknown_sys_flag_bits",
                                  "body_too_big", "flag_out_of_int32"])
def test_anything_else_off_the_plain_path_goes_the_object_way(logs: tuple[CommitLog, CommitLog], case: str) -> None:
    fast, slow = logs
    put = {
        "unknown_topic": _plain(b"x", "", topic="OtherTopic"),
        "unknown_born_host": _plain(b"x", "", born="10.9.9.9:1"),
        "prepared": _plain(b"x", "", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE),
        "unknown_sys_flag_bits": _plain(b"x", "", sys_flag=0x400),
        "body_too_big": _plain(bytes(fast.config.max_message_size + 1), ""),
        "flag_out_of_int32": _plain(b"x", "", flag=2**31),
    }[case]
    result = _same(fast, slow, put)
    assert fast.object_path_puts == 2
    refused = case in ("unknown_sys_flag_bits", "body_too_big", "flag_out_of_int32")
    assert (result.status is PutMessageStatus.MESSAGE_ILLEGAL) is refused


def test_properties_not_encodable_are_refused(logs: tuple[CommitLog, CommitLog]) -> None:
    fast, _ = logs
    end = fast.get_max_offset()
    result = fast.put(_plain(b"odd", "A\x01\ud800\x02"))  # a lone surrogate: not UTF-8
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and result.remark
    assert fast.get_max_offset() == end
