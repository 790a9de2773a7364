"""The v2 <-> 4.x message mapping (lakemq.broker.grpc.convert) and the 5.x signature, unit by unit."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from lakemq.broker.grpc.auth import parse_authorization
from lakemq.broker.grpc.convert import (
    SendRefused,
    decode_transaction_id,
    encode_transaction_id,
    java_hash_queue,
    send_header,
    v2_message,
)
from lakemq.common.acl_signature import calculate_v2_signature
from lakemq.common.message import MessageConst, MessageExt, MessageSysFlag, string_to_properties
from lakemq.grpc._pb import definition_pb2 as v2


def _v2(kind: v2.MessageType = v2.MessageType.NORMAL) -> v2.Message:
    msg = v2.Message(topic=v2.Resource(name="T"), body=b"body")
    msg.system_properties.message_id = "01ABCDEF"
    msg.system_properties.message_type = kind
    return msg


def _java_hash_code(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def test_java_hash_queue_is_select_message_queue_by_hash() -> None:
    # RocketMQ's SelectMessageQueueByHash: hashCode() % n, made positive (Java's % truncates).
    for group, queues in (("order-7", 4), ("a-much-longer-message-group-name", 7), ("", 8)):
        java_mod = abs(_java_hash_code(group)) % queues
        assert java_hash_queue(group, queues) == java_mod


def test_transaction_ids_round_trip_and_foreign_ones_are_refused() -> None:
    tid = encode_transaction_id(123_456_789_012, 42)
    assert len(tid) == 32 and decode_transaction_id(tid) == (123_456_789_012, 42)
    assert decode_transaction_id("not-ours") is None
    assert decode_transaction_id("Z" * 32) is None


def test_a_transactional_send_is_a_prepared_half_of_the_topic_group() -> None:
    msg = _v2(v2.MessageType.TRANSACTION)
    msg.system_properties.orphaned_transaction_recovery_duration.seconds = 30
    spec = send_header(msg, max_body=1024, write_queues=4)
    props = string_to_properties(spec.header.properties or "")
    assert spec.transactional and spec.header.sys_flag == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert props[MessageConst.TRANSACTION_PREPARED] == "true" and props[MessageConst.PRODUCER_GROUP] == "T"
    assert props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] == "30"
    assert props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == "01ABCDEF"


def test_a_delayed_send_needs_its_type() -> None:
    msg = _v2(v2.MessageType.NORMAL)
    msg.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_000)
    with pytest.raises(SendRefused) as refused:
        send_header(msg, max_body=1024, write_queues=4)
    assert refused.value.code == v2.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    msg.system_properties.message_type = v2.MessageType.DELAY
    props = string_to_properties(send_header(msg, max_body=1024, write_queues=4).header.properties or "")
    assert props["TIMER_DELIVER_MS"] == "1700000000000"


def test_a_stored_message_goes_out_with_its_digest_and_attempt() -> None:
    stored = MessageExt("T", b"hello", properties={MessageConst.TAGS: "A", MessageConst.KEYS: "k1 k2",
                                                    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "01X", "u": "1",
                                                    MessageConst.SHARDING_KEY: "g"},
                        reconsume_times=2, sys_flag=MessageSysFlag.COMPRESSED_FLAG)
    out = v2_message(stored)
    sp = out.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("01X", "A", ["k1", "k2"], "g")
    assert sp.message_type == v2.MessageType.FIFO and sp.delivery_attempt == 3
    assert sp.body_digest.checksum == "3610A686" and sp.body_encoding == v2.Encoding.GZIP
    assert dict(out.user_properties) == {"u": "1"}


def test_the_5x_signature_is_the_clients() -> None:
    # What rocketmq-python-client's Signature.sign computes: hex HmacSHA1(secret, date-time).
    client = hmac.new(b"secret", b"20261128T120000Z", hashlib.sha1).hexdigest()
    header = f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature={client}"
    assert parse_authorization(header) == ("ak", client.upper())
    assert calculate_v2_signature(b"20261128T120000Z", "secret") == client.upper()
    assert parse_authorization("Basic abc") is None
