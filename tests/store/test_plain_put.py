"""One message stored from a send request's parts (CommitLog.put_plain_message): the same
record, byte for byte, as the message put as an object; anything off the plain path is left to
the object path (None, nothing written)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import MessageExtBrokerInner, MessageSysFlag, string_to_properties
from lakemq.common.record import decode_record
from lakemq.store.commit_log import CommitLog
from lakemq.store.results import PutMessageResult, PutMessageStatus
from tests.store.store_helpers import open_commit_log_1m, records_but_store_time

TOPIC, QUEUE, BORN, SUFFIX = "PlainTopic", 2, "10.1.2.3:4567", "CLUSTER\x01c1\x02"
BORN_TS = 1_700_000_000_123



def _object(body: bytes, text: str, flag: int = 0, reconsume: int = 0) -> MessageExtBrokerInner:
    """What the broker builds for plain properties: the client's text with CLUSTER appended."""
    return MessageExtBrokerInner(topic=TOPIC, body=body, flag=flag, properties=string_to_properties(text + SUFFIX),
                                 properties_string=text + SUFFIX, queue_id=QUEUE, born_timestamp=BORN_TS,
                                 born_host=BORN, reconsume_times=reconsume)


def _plain(cl: CommitLog, body: bytes, text: str, *, flag: int = 0, sys_flag: int = 0, reconsume: int = 0,
           topic: str = TOPIC, born: str = BORN) -> PutMessageResult | None:
    """The plain put's result (None: off its path); without a sink it is never left pending."""
    done = cl.put_plain_message(topic, QUEUE, body, text, flag, sys_flag, BORN_TS, born, reconsume, SUFFIX.encode())
    if done is None:
        return None
    result, pending = done
    assert not pending
    return result


@pytest.fixture
def warm_log(tmp_path: Path) -> Iterator[CommitLog]:
    """A log that has seen TOPIC and BORN (the first put of each goes the object way)."""
    cl = open_commit_log_1m(tmp_path)
    assert _plain(cl, b"first", "WAIT\x01true\x02") is None
    assert cl.put_message(_object(b"first", "WAIT\x01true\x02")).status is PutMessageStatus.PUT_OK
    yield cl
    cl.shutdown()


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
        for cl in (fast, slow):
            assert cl.put_message(_object(b"first", "")).status is PutMessageStatus.PUT_OK
        for body, flag, props, reconsume in messages:
            text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
            result = _plain(fast, body, text, flag=flag, reconsume=reconsume)
            expected = slow.put_message(_object(body, text, flag, reconsume))
            assert result is not None and result.append_result is not None and expected.append_result is not None
            assert result.append_result._replace(store_timestamp=0) == expected.append_result._replace(store_timestamp=0)
        assert records_but_store_time(fast) == records_but_store_time(slow)
        assert decode_record(records_but_store_time(fast)[-1], 0).properties["CLUSTER"] == "c1"
    finally:
        fast.shutdown()
        slow.shutdown()


@pytest.mark.parametrize("text", [
    "DELAY\x013\x02",                       # delayed: the store rewrites it to SCHEDULE_TOPIC_XXXX
    "TRAN_MSG\x01true\x02",                 # a transaction's half: the broker rewrites it
    "WAIT\x01false\x02",                    # a put that does not wait for the flush
    "CLUSTER\x01other\x02",                 # the suffix's name already there: set, not appended
    "A\x01x\x02A\x01y\x02",                 # a duplicate name
    "A\x01x\x02\x02",                       # an empty pair
    "A\x02",                                # a name without a value separator
    "A\x01x",                               # no closing separator
    "A\x01\ud800\x02",                      # a lone surrogate: not encodable as UTF-8
])
def test_properties_off_the_plain_form_take_the_object_path(warm_log: CommitLog, text: str) -> None:
    end = warm_log.get_max_offset()
    assert _plain(warm_log, b"odd", text) is None
    assert warm_log.get_max_offset() == end


@pytest.mark.parametrize("case", ["unknown_topic", "unknown_born_host", "prepared", "unknown_sys_flag_bits",
                                  "body_too_big", "flag_out_of_int32"])
def test_anything_else_off_the_plain_path_writes_nothing(warm_log: CommitLog, case: str) -> None:
    end = warm_log.get_max_offset()
    result = {
        "unknown_topic": lambda: _plain(warm_log, b"x", "", topic="OtherTopic"),
        "unknown_born_host": lambda: _plain(warm_log, b"x", "", born="10.9.9.9:1"),
        "prepared": lambda: _plain(warm_log, b"x", "", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE),
        "unknown_sys_flag_bits": lambda: _plain(warm_log, b"x", "", sys_flag=0x100),
        "body_too_big": lambda: _plain(warm_log, bytes(warm_log.config.max_message_size + 1), ""),
        "flag_out_of_int32": lambda: _plain(warm_log, b"x", "", flag=2**31),
    }[case]()
    assert result is None
    assert warm_log.get_max_offset() == end
