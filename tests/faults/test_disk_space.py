"""Disk space, in the store itself, on a small file system (tmpfs, else an ext4 loop file):
expiry follows RocketMQ's ratios (only expired files above diskMaxUsedSpaceRatio, forcible
deletion only above diskSpaceCleanForciblyRatio, disk full and puts refused above
diskSpaceWarningLevelRatio); a file deleted before its fileReservedTime is a forced
deletion, logged at ERROR with the topics and message counts it removed and counted; a deleted
file holding messages a group has not consumed (after a forced deletion also any message of a
topic no group has read) is logged at ERROR and counted; the retention guard (a lake) bounds even forcible deletion;
puts are refused while dispatch fails (no ConsumeQueue file can be created), and every
acknowledged message becomes readable once space returns."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.unconsumed import unconsumed_losses
from lakemq.store.config import StoreConfig
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.faults.small_fs import fill_to, small_fs, used_percent
from tests.store.store_helpers import make_msg, wait_dispatched

TOPIC = "DiskSpace"
FILE = 1 << 20  # CommitLog file size


def _config(root: Path, **overrides: object) -> StoreConfig:
    values: dict[str, object] = {
        "store_path_root_dir": str(root), "mapped_file_size_commit_log": FILE,
        "mapped_file_size_consume_queue": 20 * 2048, "message_index_enable": False, "warm_mapped_file_ahead": 0,
        "file_reserved_time": 72, "delete_when": "99",
        "clean_resource_interval": 3_600_000,  # the test cleans
        "flush_interval_consume_queue": 50, "flush_consume_queue_thorough_interval": 0}
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def _open(config: StoreConfig) -> MessageStore:
    store = MessageStore(config)
    assert store.load()
    store.start()
    return store


def _fill_files(store: MessageStore, files: int) -> int:
    """Put 4 KiB messages until the CommitLog has ``files`` files; returns how many went in."""
    n = 0
    while len(store.commit_log.mapped_file_queue.mapped_files) < files:
        assert store.put(MessagesPut.of(make_msg(TOPIC, b"x" * 4096))).is_ok
        n += 1
    wait_dispatched(store)
    return n


def test_cleaning_follows_rocketmq_ratios_and_deletes_unconsumed_files_loudly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with small_fs(tmp_path / "disk", 16) as disk:
        store = _open(_config(disk / "store"))
        offsets = ConsumerOffsetManager(disk / "store" / "config")
        offsets.commit_offset("127.0.0.1:1", "billing", TOPIC, 0, 0)  # a group that consumed nothing yet
        store.set_unconsumed_judge(lambda ranges, unread: unconsumed_losses(offsets, ranges, unread))
        filler = disk / "filler"
        try:
            _fill_files(store, 5)
            clean = store.clean_service

            fill_to(filler, 80)  # above diskMaxUsedSpaceRatio (75), below the forcible ratio (85)
            assert clean.clean_once() == 0, "files that have not expired must stay below 85% used"
            assert store.get_min_phy_offset() == 0 and not store.health.disk_full

            with caplog.at_level(logging.ERROR, logger="lakemq.store.maintenance"):
                fill_to(filler, 87)  # above diskSpaceCleanForciblyRatio: RocketMQ deletes before expiry
                assert clean.clean_once() >= 4
            assert store.get_min_phy_offset() == 4 * FILE  # all but the file being written
            assert clean.deleted_files["forced"] == 4 and clean.unconsumed_files_deleted == 4
            loud = [r for r in caplog.records if "DELETED UNCONSUMED MESSAGES" in r.getMessage()]
            assert len(loud) == 4 and "group billing" in loud[0].getMessage()
            removed = store.get_min_offset_in_queue(TOPIC, 0)  # every message of the 4 files
            assert clean.forced_messages_deleted == {TOPIC: removed}
            assert clean.unconsumed_messages_deleted == {TOPIC: removed}  # billing had read none
            forced = [r for r in caplog.records if r.getMessage().startswith("FORCED DELETION")]
            assert len(forced) == 4 and all(f"messages: {TOPIC} " in r.getMessage() for r in forced)
            assert [d.unconsumed for d in clean.forced_deletions] == [d.messages for d in clean.forced_deletions]
            print(f"injected: a 16 MiB file system filled to 80% then 87%; measured: no deletion at "
                  f"80%, 4 forced at {used_percent(disk):.0f}%, each logged: {loud[0].getMessage()}")
        finally:
            store.shutdown()


def test_a_forced_deletion_counts_what_no_group_has_read_as_unconsumed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with small_fs(tmp_path / "disk", 16) as disk:
        store = _open(_config(disk / "store"))
        offsets = ConsumerOffsetManager(disk / "store" / "config")  # no group at all
        store.set_unconsumed_judge(lambda ranges, unread: unconsumed_losses(offsets, ranges, unread))
        try:
            _fill_files(store, 3)
            unread = "NobodyReads"
            for _ in range(3):
                assert store.put(MessagesPut.of(make_msg(unread, b"y" * 100))).is_ok
            _fill_files(store, 4)
            wait_dispatched(store)
            read_all = store.get_max_offset_in_queue(TOPIC, 0)
            offsets.commit_offset("127.0.0.1:1", "done", TOPIC, 0, read_all)  # a group read all of TOPIC
            with caplog.at_level(logging.ERROR, logger="lakemq.store.maintenance"):
                store.clean_service.clean_once(force=True)  # by hand, before fileReservedTime: forced too
            clean = store.clean_service
            assert clean.deleted_files == {"forced": 3}
            removed = store.get_min_offset_in_queue(TOPIC, 0)
            assert clean.forced_messages_deleted == {TOPIC: removed, unread: 3}
            # Only the messages no group had read count as unconsumed: the unread topic's 3.
            assert clean.unconsumed_messages_deleted == {unread: 3}
            loud = [r.getMessage() for r in caplog.records if "DELETED UNCONSUMED MESSAGES" in r.getMessage()]
            assert len(loud) == 1 and f"{unread} 3 (no group has read it)" in loud[0] and "manual" in loud[0]
            assert "manual" in clean.forced_deletions[-1].summary()
        finally:
            store.shutdown()


def test_forcible_deletion_stops_at_what_the_lake_holds(tmp_path: Path) -> None:
    with small_fs(tmp_path / "disk", 16) as disk:
        store = _open(_config(disk / "store"))
        try:
            _fill_files(store, 5)
            files = store.commit_log.mapped_file_queue.mapped_files
            lake_end = files[1].file_end_offset
            store.set_retention_guard(lambda: lake_end)  # the lake verifiably holds two files
            fill_to(disk / "filler", 88)
            store.clean_service.clean_once()
            assert store.get_min_phy_offset() == lake_end
        finally:
            store.shutdown()


def test_full_disk_refuses_puts_with_the_reason_and_takes_them_again(tmp_path: Path) -> None:
    with small_fs(tmp_path / "disk", 16) as disk:
        store = _open(_config(disk / "store"))
        filler = disk / "filler"
        try:
            assert store.put(MessagesPut.of(make_msg(TOPIC, b"before"))).is_ok
            fill_to(filler, 93)
            store.health.check()  # the clean service does this about every 100 ms
            refused = store.put(MessagesPut.of(make_msg(TOPIC, b"refused")))
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert "disk full" in refused.remark and "diskSpaceWarningLevelRatio 90%" in refused.remark
            assert store.health.refused_puts["disk_full"] == 1
            filler.unlink()
            store.health.check()
            assert store.put(MessagesPut.of(make_msg(TOPIC, b"after"))).is_ok
        finally:
            store.shutdown()


def test_failing_dispatch_refuses_puts_and_every_acked_message_becomes_readable(tmp_path: Path) -> None:
    # Disk-full detection off (a ratio never exceeded): only dispatch can notice the full disk.
    with small_fs(tmp_path / "disk", 8) as disk:
        store = _open(_config(disk / "store", mapped_file_size_consume_queue=20 * 64,
                              disk_space_warning_level_ratio=100, disk_max_used_space_ratio=100))
        filler = disk / "filler"
        acked = 0
        try:
            assert store.put(MessagesPut.of(make_msg(TOPIC, b"first"))).is_ok
            acked += 1
            wait_dispatched(store)
            with open(filler, "wb", buffering=0) as f:  # to the last block
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
            refused = None
            for i in range(5000):  # the ConsumeQueue file (64 entries) fills, the next cannot be made
                result = store.put(MessagesPut.of(make_msg(TOPIC, f"m{i}".encode())))
                if not result.is_ok:
                    refused = result
                    break
                acked += 1
                time.sleep(0.001)  # the pace of a producer waiting for its answers
            assert refused is not None, "puts were never refused while nothing could be dispatched"
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert "dispatch failed" in refused.remark and "No space left on device" in refused.remark
            for _ in range(20):  # refused for as long as dispatch fails
                assert not store.put(MessagesPut.of(make_msg(TOPIC, b"still refused"))).is_ok
            readable = store.get_max_offset_in_queue(TOPIC, 0)
            print(f"injected: an 8 MiB file system filled to the last block; measured: {acked} acked, "
                  f"{readable} readable while full, then: {refused.remark}")
            assert store.health.dispatch_failures >= 1

            filler.unlink()
            deadline = time.monotonic() + 10
            while store.get_max_offset_in_queue(TOPIC, 0) < acked:
                assert time.monotonic() < deadline, "acknowledged messages never became readable"
                time.sleep(0.02)
            assert store.health.refusal is None
            assert store.put(MessagesPut.of(make_msg(TOPIC, b"after"))).is_ok
            got = store.get_message("g", TOPIC, 0, 0, 32)
            assert got.status is GetMessageStatus.FOUND
        finally:
            store.shutdown()
