"""The CommitLog record codec: golden bytes, round trips and refusal of malformed records."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakemq.common.message import properties_to_string
from lakemq.common.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    RECORD_FIXED_SIZE,
    body_crc,
    create_message_id,
    decode_message_id,
    decode_record,
    encode_host,
    encode_record,
    iter_records,
)
from lakemq.errors import RecordError


def _record(body: bytes = b"hello", topic: bytes = b"TopicTest", props: bytes = b"", **kw: int) -> bytearray:
    return encode_record(
        topic=topic, queue_id=kw.get("queue_id", 3), body=body, flag=kw.get("flag", 7),
        properties=props, sys_flag=kw.get("sys_flag", 0), born_timestamp=1_700_000_000_000,
        born_host=encode_host("192.168.1.2:40000"), store_host=encode_host("127.0.0.1:10911"),
        reconsume_times=kw.get("reconsume_times", 0), prepared_transaction_offset=0,
        queue_offset=kw.get("queue_offset", 42), physical_offset=kw.get("physical_offset", 1024),
        store_timestamp=1_700_000_000_123,
    )


def test_golden_layout_matches_rocketmq_4x() -> None:
    rec = _record()
    # Built field by field from the table in SEEDS_DIGEST.md (4-byte RECONSUMETIMES, as 4.x).
    expected = b"".join([
        struct.pack(">i", 91 + 5 + 9 + 0),
        struct.pack(">I", 0xDAA320A7),
        struct.pack(">i", zlib.crc32(b"hello") & 0x7FFFFFFF),
        struct.pack(">i", 3),
        struct.pack(">i", 7),
        struct.pack(">q", 42),
        struct.pack(">q", 1024),
        struct.pack(">i", 0),
        struct.pack(">q", 1_700_000_000_000),
        bytes([192, 168, 1, 2]) + struct.pack(">i", 40000),
        struct.pack(">q", 1_700_000_000_123),
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),
        struct.pack(">i", 0),
        struct.pack(">q", 0),
        struct.pack(">i", 5) + b"hello",
        bytes([9]) + b"TopicTest",
        struct.pack(">h", 0),
    ])
    assert bytes(rec) == expected
    assert RECORD_FIXED_SIZE == 91


def test_decode_round_trip_and_message_id() -> None:
    props = properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}).encode()
    msg = decode_record(_record(props=props), check_crc=True)
    assert (msg.topic, msg.body, msg.queue_id, msg.flag) == ("TopicTest", b"hello", 3, 7)
    assert msg.tags == "TagA" and msg.keys == ["k1", "k2"] and msg.unique_key == "ABC"
    assert msg.born_host == "192.168.1.2:40000" and msg.store_host == "127.0.0.1:10911"
    assert msg.msg_id == "7F00000100002A9F0000000000000400"
    assert decode_message_id(msg.msg_id) == ("127.0.0.1:10911", 1024)
    assert create_message_id(bytes([127, 0, 0, 1]), 10911, 1024) == msg.msg_id


def test_crc_mismatch_is_detected() -> None:
    rec = _record()
    rec[88] ^= 0x01  # first body byte
    with pytest.raises(RecordError, match="CRC"):
        decode_record(rec, check_crc=True)


@pytest.mark.parametrize("mutate", ["magic", "size_big", "size_small", "truncate", "lengths"])
def test_malformed_records_raise(mutate: str) -> None:
    rec = _record(props=b"A\x01b\x02")
    if mutate == "magic":
        struct.pack_into(">I", rec, 4, 0x12345678)
    elif mutate == "size_big":
        struct.pack_into(">i", rec, 0, len(rec) + 10)
    elif mutate == "size_small":
        struct.pack_into(">i", rec, 0, 10)
    elif mutate == "truncate":
        rec = rec[:50]
    elif mutate == "lengths":
        struct.pack_into(">i", rec, 84, 1)  # body length no longer adds up
    with pytest.raises(RecordError):
        decode_record(rec)


def test_iter_records_stops_at_blank_and_decompresses() -> None:
    body = b"x" * 5000
    compressed = _record(body=zlib.compress(body), sys_flag=1)
    blank = struct.pack(">iI", 64, BLANK_MAGIC_CODE) + bytes(56)
    buf = bytes(_record()) + bytes(compressed) + blank
    msgs = list(iter_records(buf, decompress=True))
    assert [m.body for m in msgs] == [b"hello", body]
    assert MESSAGE_MAGIC_CODE == 0xDAA320A7


def test_body_crc_clears_sign_bit() -> None:
    data = b"\xff" * 100
    assert body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF


@given(
    body=st.binary(max_size=2048),
    topic=st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=127),
    props=st.dictionaries(st.text(alphabet="ABCDEF_", min_size=1, max_size=10),
                          st.text(alphabet="xyz 12", max_size=20), max_size=5),
    queue_id=st.integers(0, 1 << 16),
    offset=st.integers(0, 1 << 62),
)
def test_round_trip_property(body: bytes, topic: str, props: dict[str, str], queue_id: int, offset: int) -> None:
    rec = _record(body=body, topic=topic.encode(), props=properties_to_string(props).encode(),
                  queue_id=queue_id, physical_offset=offset)
    msg = decode_record(rec, check_crc=True)
    assert (msg.body, msg.topic, msg.properties, msg.queue_id, msg.commit_log_offset) == (
        body, topic, props, queue_id, offset)
    assert msg.store_size == len(rec)
