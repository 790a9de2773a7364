"""Shared helpers for the MessageStore tests: a small-file config and message builder."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

from lakemq.common.message import MessageConst, MessageExtBrokerInner, tags_hash_code
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.results import PutMessageResult


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 4096,
        "mapped_file_size_consume_queue": 10 * 20,
        "max_hash_slot_num": 8,
        "max_index_num": 40,
        "flush_interval_consume_queue": 50,
        "flush_consume_queue_thorough_interval": 0,
        "flush_interval_commit_log": 20,
        "clean_resource_interval": 3_600_000,
        "delete_when": "99",
        "disk_max_used_space_ratio": 100,
        "message_delay_level": "1s 2s",
    }
    values.update(overrides)
    return StoreConfig(**values)


def make_message(topic: str = "TopicTest", body: bytes = b"hello", queue_id: int = 0,
                 **properties: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=dict(properties),
                                 born_timestamp=1_700_000_000_000, born_host="192.168.0.7:54321")


def make_msg(topic: str, body: bytes, *, queue_id: int = 0, tags: str | None = None, keys: str | None = None,
             uniq: str | None = None, delay: int = 0, sys_flag: int = 0) -> MessageExtBrokerInner:
    props: dict[str, str] = {}
    if tags:
        props[MessageConst.TAGS] = tags
    if keys:
        props[MessageConst.KEYS] = keys
    if uniq:
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
    if delay:
        props[MessageConst.DELAY_TIME_LEVEL] = str(delay)
    return MessageExtBrokerInner(
        topic=topic, body=body, properties=props, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:40000", tags_code=tags_hash_code(tags),
    )


def open_store(root: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(small_config(root, **overrides))
    assert store.load()
    store.start()
    return store


def wait_dispatched(store: MessageStore, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.005)


def open_commit_log_1m(root: Path) -> CommitLog:
    """A started CommitLog of 1 MiB files (batches of a few KiB fit) with a fixed store host."""
    cl = CommitLog(small_config(root, mapped_file_size_commit_log=1 << 20), store_host="10.0.0.9:10911")
    cl.load()
    cl.start()
    return cl


def records_but_store_time(cl: CommitLog) -> list[bytes]:
    """Every record of the first file, its store timestamp (bytes 56-64) zeroed: to compare two
    logs written at other times."""
    data = bytes(cl.get_data(0) or b"")[: cl.get_max_offset()]
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        out.append(data[pos:pos + 56] + bytes(8) + data[pos + 64:pos + size])
        pos += size
    return out


def assert_same_put(fast: CommitLog, slow: CommitLog, result: PutMessageResult, expected: PutMessageResult) -> None:
    """Two puts (one into each log) had the same outcome and left the same records (but
    their store times)."""
    assert result.status is expected.status and result.remark == expected.remark and not result.pending
    if expected.append_result is None:
        assert result.append_result is None
    else:
        assert result.append_result is not None
        assert result.append_result._replace(store_timestamp=0) == expected.append_result._replace(store_timestamp=0)
    assert records_but_store_time(fast) == records_but_store_time(slow)
