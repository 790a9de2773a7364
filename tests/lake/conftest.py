"""Fixtures for the lake tests: one SparkSession for the whole test session (local[2], no UI)
and a real CommitLog (lakemq.store) to write segments through."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig

FILE_SIZE = 64 * 1024
BORN_MS = 1_700_000_000_000


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from lakemq.jobs.session import build_session

    session = build_session(master="local[2]", app_name="lakemq-tests", ui_enabled=False,
                            conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"})
    yield session
    session.stop()


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


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def write_store(store_dir: Path) -> WriteStore:
    """Append messages through the real CommitLog; returns their CommitLog offsets."""

    def write(messages: list[MessageExtBrokerInner], file_size: int = FILE_SIZE) -> list[int]:
        config = StoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=file_size,
                             max_message_size=16 * 1024)
        log = CommitLog(config, store_host="10.1.2.3:10911")
        assert log.load()
        log.recover_normally()
        log.start()
        try:
            offsets = []
            for msg in messages:
                result = log.put_message(msg)
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
