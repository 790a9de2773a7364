from __future__ import annotations

import pytest

from lakemq.common.message import (
    Message,
    MessageSysFlag,
    properties_to_string,
    string_to_properties,
    tags_hash_code,
    without_wait_true,
)


@pytest.mark.parametrize(
    ("tag", "java_hash"),
    [("TagA", 2598919), ("", 0), ("*", 42), ("a-much-longer-tag-value", 559710766), ("中文", 646394)],
)
def test_tags_hash_code_is_java_string_hash(tag: str, java_hash: int) -> None:
    assert tags_hash_code(tag) == java_hash


def test_properties_codec_uses_rocketmq_separators() -> None:
    props = {"TAGS": "A", "KEYS": "k1 k2"}
    text = properties_to_string(props)
    assert text == "TAGS\x01A\x02KEYS\x01k1 k2\x02"
    assert string_to_properties(text) == props
    assert string_to_properties("") == {}


def test_message_accessors() -> None:
    msg = Message("T", b"b")
    msg.tags = "TagA"
    msg.keys = ["k1", "k2"]
    msg.delay_time_level = 3
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3"}
    assert msg.keys == ["k1", "k2"] and msg.delay_time_level == 3 and msg.wait_store_msg_ok
    msg.delay_time_level = 0
    assert "DELAY" not in msg.properties


def test_sys_flag_helpers() -> None:
    flag = MessageSysFlag.reset_transaction_value(MessageSysFlag.COMPRESSED_FLAG, MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    assert flag == 5 and MessageSysFlag.transaction_value(flag) == 4
    assert MessageSysFlag.unknown_bits(flag) == 0
    assert MessageSysFlag.unknown_bits(MessageSysFlag.BORNHOST_V6_FLAG) != 0


def test_compression_type_bits() -> None:
    # RocketMQ 4.9.4+ clients name the compression in bits 8-10: LZ4 (1), ZSTD (2) and zlib (3)
    # are stored as they came; 4-7 name nothing and are refused.
    zlib_type = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.COMPRESSION_ZLIB_TYPE
    assert zlib_type == 0x301 and MessageSysFlag.unknown_bits(zlib_type) == 0
    assert MessageSysFlag.unknown_bits(0x101) == 0 and MessageSysFlag.unknown_bits(0x201) == 0
    assert MessageSysFlag.unknown_bits(0x401) == 0x400 and MessageSysFlag.unknown_bits(0x701) == 0x700
    assert MessageSysFlag.unknown_bits(0x301 | MessageSysFlag.BORNHOST_V6_FLAG) == MessageSysFlag.BORNHOST_V6_FLAG


def test_without_wait_true() -> None:
    # RocketMQ's broker stores a single send's properties without WAIT=true.
    assert without_wait_true("WAIT\x01true\x02TAGS\x01a\x02") == "TAGS\x01a\x02"
    assert without_wait_true("TAGS\x01a\x02WAIT\x01true\x02KEYS\x01k\x02") == "TAGS\x01a\x02KEYS\x01k\x02"
    assert without_wait_true("WAIT\x01false\x02") == "WAIT\x01false\x02"  # changes the put: kept
    assert without_wait_true("xWAIT\x01true\x02") == "xWAIT\x01true\x02"  # another key
    assert without_wait_true("xWAIT\x01true\x02WAIT\x01true\x02") == "xWAIT\x01true\x02"
