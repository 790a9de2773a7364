"""decode_record builds MessageExt positionally: every field must land where it belongs."""

from __future__ import annotations

import dataclasses

from lakemq.common.message import MessageExt
from lakemq.common.record import create_message_id, decode_record, encode_record


def test_decoded_fields_by_name() -> None:
    assert [f.name for f in dataclasses.fields(MessageExt)] == [
        "topic", "body", "flag", "properties", "queue_id", "store_size", "queue_offset", "sys_flag",
        "born_timestamp", "born_host", "store_timestamp", "store_host", "msg_id", "commit_log_offset",
        "body_crc", "reconsume_times", "prepared_transaction_offset"]
    record = bytes(encode_record(
        topic=b"Order", queue_id=5, body=b"payload", flag=7, properties=b"TAGS\x01A\x02", sys_flag=1,
        born_timestamp=1111, born_host=(b"\x0a\x00\x00\x02", 4321), store_host=(b"\x7f\x00\x00\x01", 10911),
        reconsume_times=3, prepared_transaction_offset=99, queue_offset=42, physical_offset=8888,
        store_timestamp=2222, crc=1234))
    msg = decode_record(record)
    assert (msg.topic, msg.body, msg.flag, msg.properties) == ("Order", b"payload", 7, {"TAGS": "A"})
    assert (msg.queue_id, msg.store_size, msg.queue_offset, msg.sys_flag) == (5, len(record), 42, 1)
    assert (msg.born_timestamp, msg.born_host, msg.store_timestamp, msg.store_host) == (
        1111, "10.0.0.2:4321", 2222, "127.0.0.1:10911")
    assert msg.msg_id == create_message_id(b"\x7f\x00\x00\x01", 10911, 8888)
    assert (msg.commit_log_offset, msg.body_crc, msg.reconsume_times, msg.prepared_transaction_offset) == (
        8888, 1234, 3, 99)
    # A memoryview into a larger buffer decodes the same record.
    assert decode_record(memoryview(b"\0" * 5 + record + b"\0" * 3), 5) == msg
