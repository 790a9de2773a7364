from __future__ import annotations

import pytest

from lakemq.common.message import (
    Message,
    MessageSysFlag,
    properties_to_string,
    string_to_properties,
    tags_hash_code,
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
