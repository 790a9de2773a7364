"""The vectorized decoder against the reference codec, and its handling of bad records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import properties_to_string
from lakemq.common.record import decode_record, encode_host, encode_record
from lakemq.errors import CorruptSegmentError
from lakemq.jobs.decode import decode_range
from lakemq.tiering.tables import MESSAGES_SCHEMA

BASE = 1 << 20


def segment(records: list[tuple[str, bytes, bytes]], base: int = BASE) -> bytes:
    """(topic, body, raw properties) -> CommitLog bytes starting at offset ``base``."""
    buf = bytearray()
    for i, (topic, body, props) in enumerate(records):
        buf += encode_record(
            topic=topic.encode(), queue_id=i % 3, body=body, flag=i, properties=props, sys_flag=i % 2 * 8,
            born_timestamp=1_700_000_000_000 + i, born_host=encode_host(f"10.0.0.{i % 4}:{5000 + i}"),
            store_host=encode_host("127.0.0.1:10911"), reconsume_times=i % 5, prepared_transaction_offset=i * 7,
            queue_offset=i, physical_offset=base + len(buf), store_timestamp=1_700_000_000_000 + i * 86_400_000,
        )
    return bytes(buf)


def check_rows(buf: bytes, base: int = BASE) -> None:
    batch, skipped = decode_range(buf, base, skip_corrupt=False)
    assert skipped == () and batch.schema == MESSAGES_SCHEMA
    pos = 0
    for row in batch.to_pylist():
        m = decode_record(buf, pos, check_crc=True)
        pos += m.store_size
        assert (row["topic"], row["body"], row["queue_id"], row["queue_offset"], row["commitlog_offset"]) == (
            m.topic, m.body, m.queue_id, m.queue_offset, m.commit_log_offset)
        assert dict(row["properties"]) == m.properties
        assert (row["tags"], row["keys"], row["uniq_key"]) == (
            m.properties.get("TAGS"), m.properties.get("KEYS"), m.properties.get("UNIQ_KEY"))
        assert (row["msg_id"], row["born_host"], row["store_host"]) == (m.msg_id, m.born_host, m.store_host)
        assert (row["flag"], row["sys_flag"], row["body_crc"], row["reconsume_times"],
                row["prepared_transaction_offset"], row["born_timestamp"], row["store_timestamp"]) == (
            m.flag, m.sys_flag, m.body_crc, m.reconsume_times, m.prepared_transaction_offset, m.born_timestamp,
            m.store_timestamp)
        assert row["store_date"].toordinal() - 719163 == m.store_timestamp // 86_400_000
    assert pos == len(buf)


def test_decodes_like_the_reference_codec() -> None:
    records = [
        ("TopicA", b"hello", properties_to_string({"TAGS": "t1", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}).encode()),
        ("%RETRY%group_1", b"", b""),
        ("TopicB", bytes(range(256)) * 3, b"a\x01b\x01c\x02noval\x02TAGS\x01x\x02TAGS\x01y\x02"),
        ("TopicA", b"\x00\x01\x02", b"KEYS\x01unterminated"),
        ("SCHEDULE_TOPIC_XXXX", b"later", properties_to_string({"REAL_TOPIC": "TopicA", "DELAY": "3"}).encode()),
    ]
    buf = segment(records)
    check_rows(buf)
    batch, _ = decode_range(buf, BASE, skip_corrupt=False)
    assert batch.column("kind").to_pylist() == ["normal", "normal", "normal", "normal", "schedule"]
    assert batch.column("tags").to_pylist()[2] == "y"  # a repeated name: the last one wins


_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "RMQ_SYS_TRANS_HALF_TOPIC", "x%y|z"]), st.binary(max_size=40),
                          st.dictionaries(_text, _text, max_size=4)), min_size=1, max_size=30))
def test_any_records_decode_like_the_reference(records: list[tuple[str, bytes, dict[str, str]]]) -> None:
    check_rows(segment([(t, b, properties_to_string(p).encode()) for t, b, p in records]))


def test_bad_crc_raises_with_the_offset_and_skip_leaves_it_out() -> None:
    buf = bytearray(segment([("T", b"body-%d" % i, b"") for i in range(5)]))
    second = decode_record(buf, 0).store_size
    buf[second + 88] ^= 0xFF  # a body byte of the second record
    with pytest.raises(CorruptSegmentError) as err:
        decode_range(bytes(buf), BASE, skip_corrupt=False)
    assert err.value.offset == BASE + second and str(BASE + second) in str(err.value)
    batch, skipped = decode_range(bytes(buf), BASE, skip_corrupt=True)
    assert batch.num_rows == 4
    assert BASE + second not in batch.column("commitlog_offset").to_pylist()
    assert skipped[0][0] == BASE + second and skipped[0][1] == BASE + second + decode_record(buf, second).store_size


def test_broken_size_field_resyncs_on_the_next_record() -> None:
    buf = bytearray(segment([("T", b"x" * 30, b"") for _ in range(6)]))
    size = decode_record(buf, 0).store_size
    buf[2 * size : 2 * size + 4] = (123456).to_bytes(4, "big")
    with pytest.raises(CorruptSegmentError) as err:
        decode_range(bytes(buf), BASE, skip_corrupt=False)
    assert err.value.offset == BASE + 2 * size
    batch, skipped = decode_range(bytes(buf), BASE, skip_corrupt=True)
    assert batch.column("queue_offset").to_pylist() == [0, 1, 3, 4, 5]
    assert skipped == ((BASE + 2 * size, BASE + 3 * size),)


def test_wrong_physical_offset_is_corrupt() -> None:
    buf = segment([("T", b"a", b""), ("T", b"b", b"")])
    with pytest.raises(CorruptSegmentError) as err:
        decode_range(buf, BASE + 8, skip_corrupt=False)
    assert err.value.offset == BASE + 8


def test_empty_range_is_an_empty_batch() -> None:
    batch, skipped = decode_range(b"", BASE, skip_corrupt=False)
    assert batch.num_rows == 0 and skipped == ()
    assert np.asarray(batch.column("commitlog_offset")).size == 0
