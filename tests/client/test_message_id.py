import datetime as dt
import re
import time

from lakemq.client.message_id import (
    MessageIdGenerator,
    create_uniq_id,
    ip_from_id,
    message_id_kind,
    pid_from_id,
    time_from_id,
)


def test_format_and_fields() -> None:
    gen = MessageIdGenerator(ip="10.1.2.3", pid=0x1_2345, salt=0x0BADBEEF)
    now = int(time.time() * 1000)
    first, second = gen.create(now), gen.create(now)
    assert re.fullmatch(r"[0-9A-F]{32}", first)
    assert first[:20] == "0A010203" + "2345" + "0BADBEEF"
    assert int(second[-4:], 16) == int(first[-4:], 16) + 1
    assert ip_from_id(first) == "10.1.2.3" and pid_from_id(first) == 0x2345
    assert abs(time_from_id(first, now + 5) - now) <= 1


def test_time_survives_the_last_week_of_a_month() -> None:
    """The 4-byte span is unsigned, as RocketMQ reads it: from day 25 of a month (2^31 ms) on, a
    31-bit field lost 2^31 ms and the id named a time weeks before it was made."""
    late = int(dt.datetime(2026, 11, 28, 12, 0).astimezone().timestamp() * 1000)
    gen = MessageIdGenerator(ip="10.1.2.3", pid=1, salt=1)
    for now in (late, late + 2 * 86_400_000):  # the 28th and the 30th
        assert time_from_id(gen.create(now), now + 5) == now


def test_unique_and_counter_wraps() -> None:
    gen = MessageIdGenerator(ip="127.0.0.1", pid=1, salt=1)
    ids = [gen.create() for _ in range(70000)]
    assert len(set(ids[:65536])) == 65536
    assert ids[65536][-4:] == "0000"
    assert create_uniq_id() != create_uniq_id()


def test_the_two_id_kinds_are_told_apart() -> None:
    """A unique key and an offset message id are both 32 hex digits; a unique key read as an
    offset id names a port above 65535 and must never be dialled (it was: OverflowError)."""
    import socket

    import pytest

    from lakemq.common.record import create_message_id, decode_message_id
    from lakemq.errors import RecordError

    offset_id = create_message_id(socket.inet_aton("127.0.0.1"), 10911, 4096)
    assert message_id_kind(offset_id) == "offset"
    for pid in (1, 0x2345, 0xFFFF, 0x1_0001):
        unique = MessageIdGenerator(ip="127.0.0.1", pid=pid, salt=0).create()
        assert message_id_kind(unique) == "unique"
        with pytest.raises(RecordError, match="probably a unique key"):
            decode_message_id(unique)
    assert message_id_kind(create_uniq_id()) == "unique"
    assert message_id_kind("Z" * 32) is None and message_id_kind("7F00") is None
