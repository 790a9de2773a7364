import re
import time

from lakemq.client.message_id import MessageIdGenerator, create_uniq_id, ip_from_id, pid_from_id, time_from_id


def test_format_and_fields() -> None:
    gen = MessageIdGenerator(ip="10.1.2.3", pid=0x1_2345, salt=0x0BADBEEF)
    now = int(time.time() * 1000)
    first, second = gen.create(now), gen.create(now)
    assert re.fullmatch(r"[0-9A-F]{32}", first)
    assert first[:20] == "0A010203" + "2345" + "0BADBEEF"
    assert int(second[-4:], 16) == int(first[-4:], 16) + 1
    assert ip_from_id(first) == "10.1.2.3" and pid_from_id(first) == 0x2345
    assert abs(time_from_id(first, now + 5) - now) <= 1


def test_unique_and_counter_wraps() -> None:
    gen = MessageIdGenerator(ip="127.0.0.1", pid=1, salt=1)
    ids = [gen.create() for _ in range(70000)]
    assert len(set(ids[:65536])) == 65536
    assert ids[65536][-4:] == "0000"
    assert create_uniq_id() != create_uniq_id()
