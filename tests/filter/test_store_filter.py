"""Sql92MessageFilter against a real MessageStore: pulls return exactly the matching records."""

from __future__ import annotations

import time
from pathlib import Path

from lakemq.common.message import MessageConst, MessageExtBrokerInner, tags_hash_code
from lakemq.common.record import decode_record, encode_host, encode_record
from lakemq.filter import Sql92MessageFilter, compile_sql92, record_properties
from lakemq.store.config import StoreConfig
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut


def _message(i: int) -> MessageExtBrokerInner:
    tags = ("tagA", "tagB")[i % 2]
    props = {MessageConst.TAGS: tags, "seq": str(i), "color": ("red", "green", "blue")[i % 3]}
    if i % 5 == 0:
        props["vip"] = "true"
    return MessageExtBrokerInner(topic="FilterTopic", body=f"m{i}".encode(), properties=props,
                                 born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:40000",
                                 tags_code=tags_hash_code(tags))


def _pull_all(store: MessageStore, text: str) -> list[int]:
    message_filter = Sql92MessageFilter(compile_sql92(text))
    seqs: list[int] = []
    offset = 0
    while True:
        result = store.get_message("g", "FilterTopic", 0, offset, 32, message_filter)
        if result.status not in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
            return seqs
        seqs += [int(decode_record(buf).properties["seq"]) for buf in result.buffers]
        offset = result.next_begin_offset


def test_pull_through_the_store_returns_exactly_the_matches(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1 << 20,
                                     mapped_file_size_consume_queue=300 * 20, max_hash_slot_num=64,
                                     max_index_num=512))
    assert store.load()
    store.start()
    try:
        messages = [_message(i) for i in range(300)]
        for msg in messages:
            assert store.put(MessagesPut.of(msg)).is_ok
        deadline = time.monotonic() + 5
        while store.dispatch_behind_bytes() > 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for text in ("color = 'red' AND seq > 100", "TAGS = 'tagB' AND vip = 'true'",
                     "vip IS NULL AND seq BETWEEN 10 AND 20", "color NOT IN ('red', 'green')"):
            expected = [i for i, m in enumerate(messages) if compile_sql92(text).matches(m.properties)]
            assert expected, text
            assert _pull_all(store, text) == expected, text
    finally:
        store.shutdown()


def test_consume_queue_check_uses_the_tags_code() -> None:
    message_filter = Sql92MessageFilter(compile_sql92("TAGS = 'tagA' AND seq > 1"))
    assert message_filter.is_matched_by_consume_queue(tags_hash_code("tagA"))
    assert not message_filter.is_matched_by_consume_queue(tags_hash_code("tagB"))
    assert Sql92MessageFilter(compile_sql92("seq > 1")).is_matched_by_consume_queue(tags_hash_code("tagB"))


def test_commit_log_check_reads_raw_records_and_decoded_properties() -> None:
    host = encode_host("127.0.0.1:10911")
    record = encode_record(topic=b"T", queue_id=0, body=b"x" * 300, flag=0,
                           properties=b"a\x017\x02TAGS\x01t\x02", sys_flag=0, born_timestamp=1,
                           born_host=host, store_host=host)
    assert record_properties(record) == b"a\x017\x02TAGS\x01t\x02"
    assert record_properties(memoryview(bytes(record))) == b"a\x017\x02TAGS\x01t\x02"
    message_filter = Sql92MessageFilter(compile_sql92("a > 5"))
    assert message_filter.is_matched_by_commit_log(bytes(record), None)
    assert not Sql92MessageFilter(compile_sql92("a > 7")).is_matched_by_commit_log(bytes(record), None)
    # The hold service's arrival notice passes decoded properties instead of a record.
    assert message_filter.is_matched_by_commit_log(None, {"a": "6"})
    assert not message_filter.is_matched_by_commit_log(None, None)
    assert Sql92MessageFilter(compile_sql92("a IS NULL")).is_matched_by_commit_log(None, None)
