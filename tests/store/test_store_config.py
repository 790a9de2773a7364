from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.common.config import bind
from lakemq.errors import ConfigError
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.results import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)


def test_defaults_follow_rocketmq() -> None:
    c = StoreConfig()
    assert c.mapped_file_size_commit_log == 1 << 30
    assert c.mapped_file_size_consume_queue == 6_000_000
    assert c.max_message_size == 4 << 20
    assert c.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert (c.flush_interval_commit_log, c.flush_commit_log_least_pages) == (500, 4)
    assert c.message_delay_level.split()[0] == "1s" and len(c.message_delay_level.split()) == 18


def test_bind_from_rocketmq_keys_and_paths(tmp_path: Path) -> None:
    c = bind(StoreConfig, {"storePathRootDir": str(tmp_path), "flushDiskType": "SYNC_FLUSH",
                           "mappedFileSizeCommitLog": "65536", "brokerName": "ignored"})
    assert c.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert c.mapped_file_size_commit_log == 65536
    assert c.commit_log_dir == tmp_path / "commitlog"
    assert c.consume_queue_dir == tmp_path / "consumequeue"
    assert c.index_dir == tmp_path / "index"
    assert c.checkpoint_path == tmp_path / "checkpoint"
    assert c.abort_file_path == tmp_path / "abort"
    assert c.config_dir == tmp_path / "config"


@pytest.mark.parametrize("key,value", [("mapped_file_size_commit_log", 0),
                                       ("mapped_file_size_consume_queue", 30),
                                       ("max_properties_size", 40000)])
def test_bad_values_refused(key: str, value: int) -> None:
    with pytest.raises(ConfigError):
        StoreConfig(**{key: value})


def test_results() -> None:
    ok = AppendMessageResult(AppendMessageStatus.PUT_OK, wrote_offset=100, wrote_bytes=50)
    assert ok.next_offset == 150
    assert PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, ok).is_ok
    assert not PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL).is_ok
