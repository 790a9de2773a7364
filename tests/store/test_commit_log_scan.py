from __future__ import annotations

import pytest

from lakemq.common.message import MessageConst, MessageExtBrokerInner, properties_to_string, tags_hash_code
from lakemq.common.record import (
    BLANK_MAGIC_CODE,
    BODY_POS,
    check_record,
    encode_host,
    encode_record,
    patch_record,
)
from lakemq.errors import ConfigError
from lakemq.store.commit_log_scan import iter_dispatch_requests, read_dispatch_request, scan_valid_end
from lakemq.store.delay_levels import SCHEDULE_TOPIC, DelayLevels, rewrite_delayed_message

HOST = encode_host("10.0.0.1:10911")


def _record(topic: str, body: bytes, props: dict[str, str], offset: int, qo: int = 0, ts: int = 1000) -> bytearray:
    rec = encode_record(topic=topic.encode(), queue_id=2, body=body, flag=0,
                        properties=properties_to_string(props).encode(), sys_flag=0,
                        born_timestamp=5, born_host=HOST, store_host=HOST)
    patch_record(rec, 0, qo, offset, ts)
    return rec


def test_walk_good_records_then_blank() -> None:
    a = _record("T", b"one", {"TAGS": "tagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}, 0)
    b = _record("T", b"two", {}, len(a), qo=1, ts=2000)
    buf = bytearray(a + b + bytes(64))
    buf[len(a) + len(b) : len(a) + len(b) + 8] = (64).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big")
    reqs = list(iter_dispatch_requests(memoryview(buf), 0, 0, check_crc=True))
    assert [r.msg_size for r in reqs] == [len(a), len(b), 0]
    first = reqs[0]
    assert (first.topic, first.queue_id, first.commit_log_offset) == ("T", 2, 0)
    assert first.tags_code == tags_hash_code("tagA")
    assert first.keys == "k1 k2" and first.uniq_key == "U1"
    assert reqs[1].consume_queue_offset == 1 and reqs[1].store_timestamp == 2000
    assert scan_valid_end(buf, 0, 0, check_crc=True) == (len(a) + len(b), True)


def test_bad_crc_wrong_offset_and_garbage_stop_the_walk() -> None:
    a = _record("T", b"payload", {}, 0)
    assert check_record(a, 0, check_crc=True, physical_offset=0) == len(a)
    assert check_record(a, 0, check_crc=True, physical_offset=8) == -1  # stale record elsewhere
    flipped = bytearray(a)
    flipped[BODY_POS + 1] ^= 0xFF  # a body byte
    assert check_record(flipped, 0, check_crc=True) == -1
    assert check_record(flipped, 0, check_crc=False) == len(a)
    assert check_record(a[:-1], 0, check_crc=False) == -1  # half written
    assert check_record(bytes(200), 0, check_crc=False) == -1
    assert scan_valid_end(a + b"\xde\xad\xbe\xef" * 30, 0, 0, check_crc=True) == (len(a), False)
    assert read_dispatch_request(flipped, 0, 0, check_crc=True).success is False


def test_delay_levels_and_rewrite() -> None:
    levels = DelayLevels("1s 5s 2m 1h 1d")
    assert levels.delays_ms == (1000, 5000, 120_000, 3_600_000, 86_400_000)
    assert levels.deliver_timestamp(99, 10) == 10 + 86_400_000  # clamped to the max level
    with pytest.raises(ConfigError):
        DelayLevels("1s 5x")
    msg = MessageExtBrokerInner(topic="orders", queue_id=3, body=b"b", properties={MessageConst.DELAY_TIME_LEVEL: "9"})
    assert rewrite_delayed_message(msg, levels)
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 4)
    assert msg.properties[MessageConst.REAL_TOPIC] == "orders" and msg.properties[MessageConst.REAL_QUEUE_ID] == "3"
    assert "REAL_TOPIC\x01orders\x02" in msg.properties_string and "DELAY\x015\x02" in msg.properties_string
    prepared = MessageExtBrokerInner(topic="t", sys_flag=0x4, properties={MessageConst.DELAY_TIME_LEVEL: "2"})
    assert not rewrite_delayed_message(prepared, levels)
    rec = _record(SCHEDULE_TOPIC, b"x", msg.properties, 0, ts=1_000)
    assert read_dispatch_request(rec, 0, 0, check_crc=True, delay_levels=levels).tags_code == 1_000 + 86_400_000
