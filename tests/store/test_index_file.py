"""IndexFile and IndexService: byte layout, collision chains, time ranges, roll, recovery, expiry."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from lakemq.common.message import MessageSysFlag
from lakemq.errors import CorruptFileError
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.index_file import HEADER_SIZE, IndexFile, index_file_size, index_key_hash
from lakemq.store.index_service import IndexService

T0 = 1_700_000_000_000


def request(offset: int, *, keys: str = "", uniq: str | None = None, topic: str = "T", ts: int = T0,
            sys_flag: int = 0) -> DispatchRequest:
    return DispatchRequest(msg_size=100, topic=topic, commit_log_offset=offset, store_timestamp=ts,
                           keys=keys, uniq_key=uniq, sys_flag=sys_flag)


def test_java_hash_and_abs() -> None:
    assert index_key_hash("T#k1") == abs(_java_hash("T#k1"))
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Math.abs keeps it negative -> 0
    assert _java_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_layout_on_disk(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 4, 8)
    assert f.file_size == index_file_size(4, 8) == 40 + 4 * 4 + 8 * 20
    assert f.put_key("T#a", 1234, T0)
    assert f.put_key("T#b", 5678, T0 + 2500)
    f.flush()
    raw = (tmp_path / "20240101000000000").read_bytes()
    assert struct.unpack_from(">qqqqii", raw, 0) == (T0, T0 + 2500, 1234, 5678, 2, 3)
    h = index_key_hash("T#b")
    assert struct.unpack_from(">i", raw, HEADER_SIZE + (h % 4) * 4)[0] == 2
    entry2 = struct.unpack_from(">iqii", raw, HEADER_SIZE + 16 + 2 * 20)
    assert entry2[:3] == (h, 5678, 2)  # time diff in whole seconds


def test_collisions_chain_in_one_slot(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 1, 50)  # one slot: every key collides
    for i in range(30):
        assert f.put_key(f"T#k{i % 3}", i * 100, T0 + i * 1000)
    assert f.select_phy_offsets("T#k1", 100, 0, 2**62) == [2800, 2500, 2200, 1900, 1600, 1300, 1000, 700, 400, 100]
    assert f.select_phy_offsets("T#k1", 3, 0, 2**62) == [2800, 2500, 2200]
    assert f.select_phy_offsets("T#k0", 100, T0 + 10_000, T0 + 20_000) == [1800, 1500, 1200]
    assert f.select_phy_offsets("T#zzz", 100, 0, 2**62) == []
    f.close()
    reopened = IndexFile(tmp_path / "20240101000000000", 1, 50)
    assert reopened.entry_count() == 30
    assert reopened.select_phy_offsets("T#k2", 2, 0, 2**62) == [2900, 2600]


def test_full_file_refuses(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 2, 3)
    assert f.put_key("a", 0, T0) and f.put_key("b", 1, T0)
    assert f.is_write_full()
    assert not f.put_key("c", 2, T0)


def test_undo_restores_chains(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20240101000000000", 2, 50)
    for i in range(10):
        f.put_key(f"T#k{i % 2}", i * 100, T0 + i * 1000)
    assert f.undo_entries_from(650) == 3
    assert f.entry_count() == 7 and f.end_phy_offset == 600
    assert f.select_phy_offsets("T#k1", 100, 0, 2**62) == [500, 300, 100]
    f.put_key("T#k1", 700, T0 + 7000)
    assert f.select_phy_offsets("T#k1", 100, 0, 2**62) == [700, 500, 300, 100]


def test_service_keys_roll_and_query(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)  # 4 entries per file
    svc.load(True, 0)
    for i in range(10):
        svc.dispatch(request(i * 100, keys=f"order{i % 2} shared", uniq=f"U{i}", ts=T0 + i * 1000))
    # 3 keys per message: 30 entries over 8 files
    assert len(svc.index_files) == 8
    assert len({f.file_name for f in svc.index_files}) == 8
    assert svc.query_offset("T", "U7", 10, 0, 2**62).phy_offsets == [700]
    assert svc.query_offset("T", "order1", 10, 0, 2**62).phy_offsets == [900, 700, 500, 300, 100]
    assert svc.query_offset("T", "shared", 4, 0, 2**62).phy_offsets == [900, 800, 700, 600]
    assert svc.query_offset("T", "order0", 10, T0 + 3000, T0 + 6000).phy_offsets == [600, 400]
    assert svc.query_offset("Other", "order0", 10, 0, 2**62).phy_offsets == []
    result = svc.query_offset("T", "U1", 10, 0, 2**62)
    assert (result.index_last_update_phy_offset, result.index_last_update_timestamp) == (900, T0 + 9000)
    # a replay of already indexed records adds nothing; rollback records are not indexed
    svc.dispatch(request(900, keys="order1"))
    svc.dispatch(request(1000, keys="rb", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))
    assert svc.query_offset("T", "order1", 10, 0, 2**62).phy_offsets == [900, 700, 500, 300, 100]
    assert svc.query_offset("T", "rb", 10, 0, 2**62).phy_offsets == []
    svc.shutdown()
    again = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)
    again.load(True, 0)
    assert again.query_offset("T", "order1", 10, 0, 2**62).phy_offsets == [900, 700, 500, 300, 100]
    assert again.delete_expired_file(500) == 3  # files ending at 100, 200, 300
    assert again.query_offset("T", "order1", 10, 0, 2**62).phy_offsets == [900, 700, 500]


def test_abnormal_load_drops_unflushed_files_and_truncate(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)
    svc.load(True, 0)
    for i in range(6):
        svc.dispatch(request(i * 100, keys=f"k{i}", ts=T0 + i * 1000))
    assert len(svc.index_files) == 2
    flushed = svc.flushed_timestamp
    assert flushed == T0 + 3000  # the full first file went to disk when the second was made
    svc.shutdown()
    again = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)
    assert again.load(False, flushed) == T0 + 4000  # the second file is rebuilt from there
    assert len(again.index_files) == 1
    again.truncate_dirty(250)
    assert again.query_offset("T", "k3", 10, 0, 2**62).phy_offsets == []
    assert again.query_offset("T", "k2", 10, 0, 2**62).phy_offsets == [200]
    assert again.query_offset("T", "k1", 10, 0, 2**62).phy_offsets == [100]
    again.dispatch(request(250, keys="k9", ts=T0 + 5000))
    assert again.query_offset("T", "k9", 10, 0, 2**62).phy_offsets == [250]


def test_a_newest_file_cut_while_being_made_is_removed_after_a_crash_only(tmp_path: Path) -> None:
    """A power cut between a file's create and the sync of its size leaves its name and no
    bytes (a power-cut run found it): after a crash it is removed and rebuilt from where the
    file before it ends; after a clean shutdown such a file is damage and refused."""
    svc = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)
    svc.load(True, 0)
    for i in range(4):
        svc.dispatch(request(i * 100, keys=f"k{i}", ts=T0 + i * 1000))
    svc.shutdown()
    cut_short = tmp_path / "index" / "29990101000000000"
    cut_short.write_bytes(b"")
    with pytest.raises(CorruptFileError, match="expected"):
        IndexService(tmp_path / "index", hash_slot_num=3, index_num=5).load(True, T0 + 3000)
    again = IndexService(tmp_path / "index", hash_slot_num=3, index_num=5)
    assert again.load(False, T0 + 3000) == T0 + 3000
    assert not cut_short.exists()
    assert again.query_offset("T", "k3", 10, 0, 2**62).phy_offsets == [300]
    again.dispatch(request(400, keys="k4", ts=T0 + 4000))
    assert again.query_offset("T", "k4", 10, 0, 2**62).phy_offsets == [400]


def test_bad_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    IndexFile(path, 4, 8).close()
    with pytest.raises(CorruptFileError, match="expected"):
        IndexFile(path, 4, 9)  # the configured entry count changed: sizes differ
    raw = bytearray(path.read_bytes())
    struct.pack_into(">i", raw, 36, 1000)
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="header count"):
        IndexFile(path, 4, 8)
