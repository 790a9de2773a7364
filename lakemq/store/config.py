"""The hot-tier store's configuration (RocketMQ's MessageStoreConfig, the keys the store reads).

Bound from broker.conf with :func:`lakemq.common.config.bind`; the camelCase key of every field
is RocketMQ's own (``storePathRootDir``, ``mappedFileSizeCommitLog``, ``flushDiskType`` ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from lakemq.errors import ConfigError, StoreError

__all__ = ["CONSUME_QUEUE_UNIT_SIZE", "DEFAULT_STORE_ROOT", "BrokerRole", "FlushDiskType", "StoreConfig",
           "check_store_root", "store_root"]

CONSUME_QUEUE_UNIT_SIZE = 20
# Where a broker keeps its store when neither --data-dir nor storePathRootDir says.
DEFAULT_STORE_ROOT = os.path.join(os.path.expanduser("~"), "lakemq-data")


class FlushDiskType(Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"  # ack once in the page cache; flushed in the background
    SYNC_FLUSH = "SYNC_FLUSH"  # ack once on disk (group commit)


class BrokerRole(Enum):
    """What the store of a broker group's member does (RocketMQ's BrokerRole)."""

    ASYNC_MASTER = "ASYNC_MASTER"  # takes puts; a slave follows it, a send does not wait for it
    SYNC_MASTER = "SYNC_MASTER"  # takes puts; a send with WAIT waits for a slave to have it too
    SLAVE = "SLAVE"  # refuses puts; its CommitLog is the master's, appended by replication

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


@dataclass(frozen=True, slots=True)
class StoreConfig:
    store_path_root_dir: str = DEFAULT_STORE_ROOT
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CONSUME_QUEUE_UNIT_SIZE
    max_message_size: int = 4 * 1024 * 1024
    max_properties_size: int = 32767  # Short.MAX_VALUE: the record stores a 2-byte length
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    sync_flush_timeout: int = 5_000
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # SYNC_MASTER: how long a send waits for a slave to acknowledge it (FLUSH_SLAVE_TIMEOUT),
    # and how far behind (bytes) a slave may be and still be waited for (SLAVE_NOT_AVAILABLE).
    slave_timeout: int = 3_000
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    # A slave answers a pull outside its queue's range without moving the consumer's offset
    # (it may be behind the master); true makes it correct offsets as a master does.
    offset_check_in_slave: bool = False
    flush_interval_consume_queue: int = 1_000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    file_reserved_time: int = 72  # hours
    clean_resource_interval: int = 10_000
    delete_when: str = "04"  # hours of the day (``;``-separated) when expired files go
    # Disk usage (%) of the store's file system, as RocketMQ: above diskMaxUsedSpaceRatio
    # expired files go at any hour; above diskSpaceCleanForciblyRatio files go before they
    # expire (cleanFileForciblyEnable); above diskSpaceWarningLevelRatio the disk is full and
    # puts are refused.
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    # lakemq: puts are refused while dispatch is this many bytes behind the CommitLog's end
    # (what is acknowledged must become readable).
    max_dispatch_behind_bytes: int = 1024 * 1024 * 1024
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_index_enable: bool = True
    message_index_safe: bool = False
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    flush_delay_offset_interval: int = 10_000
    # Timer messages (lakemq.store.timer): on or off, the longest delay a producer may ask
    # for (RocketMQ caps it at 3 days; here 30 days by default), and how often the timer's
    # progress is saved.
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 30 * 86_400
    timer_flush_interval_ms: int = 1_000
    check_crc_on_recover: bool = True
    os_page_cache_busy_timeout_mills: int = 1_000
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    max_msgs_num_batch: int = 64
    # lakemq: bytes ahead of the CommitLog write position kept pre-faulted (0: off).
    warm_mapped_file_ahead: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        positive = ("mapped_file_size_commit_log", "mapped_file_size_consume_queue",
                    "max_message_size", "max_properties_size", "flush_interval_commit_log",
                    "sync_flush_timeout", "flush_interval_consume_queue", "max_hash_slot_num",
                    "max_index_num", "slave_timeout", "ha_slave_fallbehind_max", "timer_max_delay_sec",
                    "timer_flush_interval_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.mapped_file_size_consume_queue % CONSUME_QUEUE_UNIT_SIZE:
            raise ConfigError(
                f"mapped_file_size_consume_queue must be a multiple of {CONSUME_QUEUE_UNIT_SIZE}"
            )
        ratios = (self.disk_max_used_space_ratio, self.disk_space_clean_forcibly_ratio,
                  self.disk_space_warning_level_ratio)
        if not all(0 < r <= 100 for r in ratios):
            raise ConfigError(f"disk ratios must be within 1..100, got {ratios}")
        if self.max_dispatch_behind_bytes <= 0:
            raise ConfigError(f"max_dispatch_behind_bytes must be > 0, got {self.max_dispatch_behind_bytes}")
        if self.max_properties_size > 32767:
            raise ConfigError("max_properties_size cannot exceed 32767 (a 2-byte length field)")

    @property
    def root_dir(self) -> Path:
        return Path(self.store_path_root_dir)

    @property
    def commit_log_dir(self) -> Path:
        return self.root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root_dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.root_dir / "checkpoint"

    @property
    def abort_file_path(self) -> Path:
        return self.root_dir / "abort"

    @property
    def config_dir(self) -> Path:
        return self.root_dir / "config"

    @property
    def delay_offset_path(self) -> Path:
        return self.config_dir / "delayOffset.json"

    @property
    def timer_checkpoint_path(self) -> Path:
        return self.config_dir / "timerCheckpoint.json"


def store_root(props: Mapping[str, str], data_dir: str | Path | None = None) -> Path:
    """The store root every command takes the same way: ``data_dir`` (``--data-dir``) when
    given, else the conf's ``storePathRootDir``, else ``~/lakemq-data``; made absolute."""
    if data_dir is not None and str(data_dir):
        chosen = str(data_dir)
    else:
        chosen = props.get("storePathRootDir") or props.get("store_path_root_dir") or DEFAULT_STORE_ROOT
    return Path(chosen).expanduser().resolve()


def check_store_root(root: Path) -> None:
    """Raise StoreError unless ``root`` holds a broker's store (its commitlog/ or checkpoint)."""
    if not ((root / "commitlog").is_dir() or (root / "checkpoint").is_file()):
        what = "does not exist" if not root.exists() else "holds no commitlog/ and no checkpoint"
        raise StoreError(f"no broker store at {root}: the directory {what}; pass the broker's store with "
                         "--data-dir DIR or storePathRootDir in its conf")
