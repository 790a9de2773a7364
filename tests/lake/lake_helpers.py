"""Helpers shared by the lake tests: messages, and writing them through the real CommitLog."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakemq.client import SyncPullConsumer
from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.store.checkpoint import read_flushed_offset
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.put_request import MessagesPut

FILE_SIZE = 64 * 1024
STORE_HOST = "10.1.2.3:10911"
BORN_MS = 1_700_000_000_000


def make_message(topic: str, body: bytes, *, queue_id: int = 0, keys: str | None = None, tags: str | None = None,
                 uniq: str | None = None, sys_flag: int = 0, **props: str) -> MessageExtBrokerInner:
    properties = dict(props)
    if keys:
        properties[MessageConst.KEYS] = keys
    if tags:
        properties[MessageConst.TAGS] = tags
    if uniq:
        properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=properties, sys_flag=sys_flag,
                                 born_timestamp=BORN_MS, born_host="192.168.0.7:54321")


WriteStore = Callable[..., list[int]]


def store_writer(store_dir: Path) -> WriteStore:
    """Append messages through the real CommitLog; returns their CommitLog offsets."""

    def write(messages: list[MessageExtBrokerInner], file_size: int = FILE_SIZE,
              store_host: str = STORE_HOST) -> list[int]:
        config = StoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=file_size,
                             max_message_size=16 * 1024)
        log = CommitLog(config, store_host=store_host)
        assert log.load()
        log.recover_normally()
        log.start()
        try:
            offsets = []
            for msg in messages:
                result = log.put(MessagesPut.of(msg))
                assert result.is_ok, result
                assert result.append_result is not None
                offsets.append(result.append_result.wrote_offset)
            return offsets
        finally:
            log.shutdown()

    return write


def user_messages(n: int, *, topic: str = "TopicA", body_size: int = 100) -> list[MessageExtBrokerInner]:
    return [make_message(topic, (f"m{i}:".encode() + bytes(body_size))[:body_size], queue_id=i % 4,
                         keys=f"order-{i} k{i % 10}", tags=f"tag{i % 3}", uniq=f"UNIQ{i:08d}") for i in range(n)]


def mixed_messages(n_user: int) -> list[MessageExtBrokerInner]:
    """User messages plus one of each system kind: a delayed message (the store rewrites it
    to SCHEDULE_TOPIC_XXXX), a half message and its op record (written where the broker
    writes them)."""
    msgs = user_messages(n_user)
    msgs.append(make_message("TopicA", b"later", DELAY="2"))
    msgs.append(make_message("RMQ_SYS_TRANS_HALF_TOPIC", b"half", sys_flag=4, REAL_TOPIC="TopicA", REAL_QID="0",
                             PGROUP="pg"))
    msgs.append(make_message("RMQ_SYS_TRANS_OP_HALF_TOPIC", b"0", tags="d"))
    return msgs


def read_all(namesrv: str, topic: str, group: str = "LakeTestReader") -> list[Any]:
    """Every message of TOPIC, pulled queue by queue from its min to its max offset."""
    msgs: list[Any] = []
    with SyncPullConsumer(group, namesrv_addr=namesrv) as reader:
        for mq in reader.fetch_subscribe_message_queues(topic):
            offset, end = reader.min_offset(mq), reader.max_offset(mq)
            while offset < end:
                result = reader.pull(mq, "*", offset, 32)
                msgs += result.msgs
                offset = result.next_begin_offset
    return msgs


def transaction_rows(state: str, n: int, now: int) -> list[dict[str, Any]]:
    """Rows of the transaction sweep's table, numbered by half queue offset."""
    from lakemq.jobs.transaction_sweep import TRANSACTIONS_SCHEMA

    rows = []
    for i in range(n):
        row = {f.name: None for f in TRANSACTIONS_SCHEMA}
        row.update(store_host="10.1.2.3:10911", half_queue_offset=i, half_offset=1000 + i, msg_id=f"ID{i:04d}",
                   uniq_key=f"TX{i:04d}", topic="TopicA", born_timestamp=now, store_timestamp=now, state=state,
                   checks=i % 3, copies=1, swept_at=now)
        rows.append(row)
    return rows


def wait_flushed(store: Path, past: int) -> None:
    """Wait (30 s at most) until the broker's checkpoint publishes a flushed offset past ``past``."""
    deadline = time.monotonic() + 30
    while read_flushed_offset(store / "checkpoint") <= past:
        assert time.monotonic() < deadline, "the broker never published its flushed offset"
        time.sleep(0.05)
