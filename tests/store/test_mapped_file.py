from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from lakemq.errors import CorruptFileError, StoreError
from lakemq.store.mapped_file import OS_PAGE_SIZE, MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.put_request import MessagesPut

SIZE = 4 * OS_PAGE_SIZE


def test_mapped_file_append_select_read(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{SIZE:020d}", SIZE)
    assert mf.file_from_offset == SIZE and os.path.getsize(mf.path) == SIZE
    assert mf.append(b"hello") == 0
    assert mf.append(bytearray(b"world")) == 5
    assert bytes(mf.select(0)) == b"helloworld"
    assert bytes(mf.select(5, 100)) == b"world"  # clipped to the wrote position
    assert mf.read(3, 4) == b"lowo"
    assert mf.remaining() == SIZE - 10
    mf.write_at(0, b"J")
    assert mf.read(0, 5) == b"Jello"
    with pytest.raises(StoreError):
        mf.append(b"x" * SIZE)
    mf.close()


def test_mapped_file_flush_least_pages(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", SIZE)
    mf.append(b"a" * 100)
    assert mf.flush(least_pages=1) == 0  # less than a page dirty
    assert mf.flush() == 100
    mf.append(b"b" * OS_PAGE_SIZE)
    assert mf.flush(least_pages=1) == 100 + OS_PAGE_SIZE
    mf.close()
    assert (tmp_path / f"{0:020d}").read_bytes()[:101] == b"a" * 100 + b"b"


def test_mapped_file_discard_after_zeroes_tail(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", SIZE)
    mf.append(b"x" * (2 * OS_PAGE_SIZE + 10))
    mf.discard_after(7)
    assert mf.wrote_position == 7
    assert bytes(mf.raw_view()[:7]) == b"x" * 7
    assert bytes(mf.raw_view()[7:]) == bytes(SIZE - 7)
    assert os.path.getsize(mf.path) == SIZE
    mf.destroy()
    assert not mf.path.exists()


def test_close_with_live_view_does_not_fail(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", SIZE)
    mf.append(b"abc")
    view = mf.select(0)
    mf.destroy()
    assert bytes(view) == b"abc"
    view.release()


def test_a_destroyed_file_reads_as_empty(tmp_path: Path) -> None:
    """A reader that found the file before expiry destroyed it gets nothing, not an error."""
    mf = MappedFile(tmp_path / f"{0:020d}", SIZE)
    mf.append(b"abc")
    mf.destroy()
    assert bytes(mf.select(0)) == b"" and mf.read(0, 3) == b""


def test_queue_roll_lookup_min_max(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", SIZE)
    assert q.get_last_mapped_file(need_create=False) is None
    assert q.get_min_offset() == 0 and q.get_max_offset() == 0
    mf = q.get_last_mapped_file(start_offset=SIZE + 5)
    assert mf is not None and mf.file_from_offset == SIZE
    mf.append(b"z" * SIZE)
    mf2 = q.get_last_mapped_file()
    assert mf2 is not None and mf2.file_from_offset == 2 * SIZE
    mf2.append(b"y" * 10)
    assert q.get_min_offset() == SIZE
    assert q.get_max_offset() == 2 * SIZE + 10
    assert q.find_mapped_file_by_offset(2 * SIZE + 3) is mf2
    assert q.find_mapped_file_by_offset(SIZE) is mf
    assert q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(0, return_first_on_not_found=True) is mf
    assert q.roll_next_file(SIZE + 1) == 2 * SIZE
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == [f"{SIZE:020d}", f"{2 * SIZE:020d}"]
    assert q.flush() is True
    assert q.flushed_where == 2 * SIZE + 10
    q.shutdown()


def test_queue_load_and_truncate(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    for _ in range(3):
        q.get_last_mapped_file().append(b"r" * SIZE)  # type: ignore[union-attr]
    q.shutdown()
    q2 = MappedFileQueue(tmp_path, SIZE)
    assert q2.load() and len(q2.mapped_files) == 3
    q2.truncate_dirty_files(SIZE + 100)
    assert len(q2.mapped_files) == 2
    assert q2.get_max_offset() == SIZE + 100
    assert q2.mapped_files[1].read(0, 200) == b"r" * 100
    assert not (tmp_path / f"{2 * SIZE:020d}").exists()
    assert (tmp_path / f"{SIZE:020d}").read_bytes()[100:] == bytes(SIZE - 100)
    q2.delete_last_mapped_file()
    assert q2.get_max_offset() == SIZE
    q2.destroy()
    assert not tmp_path.exists()


def test_load_repairs_wrong_sizes_and_refuses_size_change(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    for fill in (b"a", b"b", b"c"):
        q.get_last_mapped_file().append(fill * (SIZE if fill != b"c" else 10))  # type: ignore[union-attr]
    q.shutdown()
    os.truncate(tmp_path / f"{2 * SIZE:020d}", 50)  # a crash while creating the last file
    os.truncate(tmp_path / f"{SIZE:020d}", SIZE // 2)  # a damaged middle file
    with open(tmp_path / f"{0:020d}", "ab") as f:
        f.write(bytes(100))  # zeros past the end
    q2 = MappedFileQueue(tmp_path, SIZE)
    assert q2.load()
    assert [os.path.getsize(mf.path) for mf in q2.mapped_files] == [SIZE] * 3
    assert q2.mapped_files[0].raw_view()[:SIZE].tobytes() == b"a" * SIZE
    assert q2.mapped_files[1].raw_view()[: SIZE // 2].tobytes() == b"b" * (SIZE // 2)
    assert q2.mapped_files[2].raw_view()[:10].tobytes() == b"c" * 10
    q2.shutdown()
    # Data past the configured size: refuse, touch nothing.
    with open(tmp_path / f"{SIZE:020d}", "ab") as f:
        f.write(b"data")
    with pytest.raises(CorruptFileError):
        MappedFileQueue(tmp_path, SIZE).load()
    assert os.path.getsize(tmp_path / f"{SIZE:020d}") == SIZE + 4
    os.truncate(tmp_path / f"{SIZE:020d}", SIZE)
    # Another configured size: names do not line up; refuse, touch nothing.
    for other in (SIZE // 2, SIZE * 2):
        with pytest.raises(CorruptFileError):
            MappedFileQueue(tmp_path, other).load()
    assert [os.path.getsize(tmp_path / f"{i * SIZE:020d}") for i in range(3)] == [SIZE] * 3
    # A missing middle file: refuse rather than serve a log with a hole.
    (tmp_path / f"{SIZE:020d}").unlink()
    with pytest.raises(CorruptFileError):
        MappedFileQueue(tmp_path, SIZE).load()


def test_delete_expired_by_time_respects_guard_and_last_file(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    for _ in range(4):
        q.get_last_mapped_file().append(b"m" * SIZE)  # type: ignore[union-attr]
    old = 1_000_000.0
    for mf in q.mapped_files:
        os.utime(mf.path, (old, old))
    now = int(old * 1000) + 10_000
    assert q.delete_expired_file_by_time(60_000, 10 * SIZE, now_ms=now) == 0  # not expired
    assert q.delete_expired_file_by_time(5_000, 2 * SIZE, now_ms=now) == 2  # guard stops at 2
    assert q.get_min_offset() == 2 * SIZE
    assert q.delete_expired_file_by_time(5_000, 100 * SIZE, now_ms=now) == 1  # last kept
    assert len(q.mapped_files) == 1 and q.get_min_offset() == 3 * SIZE
    assert q.find_mapped_file_by_offset(3 * SIZE) is q.mapped_files[0]


def test_delete_expired_by_offset_units(tmp_path: Path) -> None:
    unit = 20
    q = MappedFileQueue(tmp_path, unit * 4)
    phy = 0
    for _ in range(3 * 4):
        q.get_last_mapped_file().append(struct.pack(">qiq", phy, 10, 0))  # type: ignore[union-attr]
        phy += 10
    assert q.delete_expired_file_by_offset(30, unit) == 0  # first file's last unit is 30, still needed
    assert q.delete_expired_file_by_offset(75, unit) == 2
    assert q.get_min_offset() == 2 * unit * 4


def test_warm_prefaults_without_changing_content(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / f"{0:020d}", SIZE)
    mf.append(b"keep")
    assert mf.warm(2 * OS_PAGE_SIZE)
    assert mf.warmed_position == 2 * OS_PAGE_SIZE
    assert mf.warm(10 * SIZE) and mf.warmed_position == SIZE  # clipped to the file
    mf.append(b"more")
    assert mf.read(0, 8) == b"keepmore"
    assert bytes(mf.raw_view()[8:]) == bytes(SIZE - 8)
    mf.close()
    assert mf.warm(SIZE)  # closed: nothing to do, no error
    assert (tmp_path / f"{0:020d}").read_bytes()[:8] == b"keepmore"


def test_warm_service_keeps_ahead_of_the_writer(tmp_path: Path) -> None:
    import time

    from lakemq.store.warm import WarmMappedFileService

    q = MappedFileQueue(tmp_path, 64 * OS_PAGE_SIZE)
    mf = q.get_last_mapped_file()
    assert mf is not None
    service = WarmMappedFileService(q, ahead_bytes=8 * OS_PAGE_SIZE)
    service.start()
    deadline = time.monotonic() + 5
    while mf.warmed_position < 8 * OS_PAGE_SIZE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mf.warmed_position == 8 * OS_PAGE_SIZE
    mf.append(b"w" * 20 * OS_PAGE_SIZE)
    while mf.warmed_position < 28 * OS_PAGE_SIZE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mf.warmed_position == 28 * OS_PAGE_SIZE
    service.shutdown()
    q.shutdown()


def test_warm_service_polls_less_while_nothing_needs_warming(tmp_path: Path) -> None:
    """Idle, the warmer backs off to a 100 ms poll (it polled every 10 ms: 100 wake-ups a
    second of an idle broker); the writer moving again brings it back at once."""
    import time

    from lakemq.store.warm import WarmMappedFileService

    q = MappedFileQueue(tmp_path, 64 * OS_PAGE_SIZE)
    mf = q.get_last_mapped_file()
    assert mf is not None
    looks = 0
    last_file = q.get_last_mapped_file

    def counted(need_create: bool = True) -> MappedFile | None:
        nonlocal looks
        looks += 1
        return last_file(need_create=need_create)

    q.get_last_mapped_file = counted  # type: ignore[method-assign]
    service = WarmMappedFileService(q, ahead_bytes=8 * OS_PAGE_SIZE)
    service.start()
    time.sleep(0.5)  # warmed within the first poll, then idle
    looks_before = looks
    time.sleep(1.0)
    idle_polls = looks - looks_before
    mf.append(b"w" * 20 * OS_PAGE_SIZE)
    deadline = time.monotonic() + 0.5
    while mf.warmed_position < 28 * OS_PAGE_SIZE and time.monotonic() < deadline:
        time.sleep(0.005)
    caught_up = mf.warmed_position
    service.shutdown()
    q.shutdown()
    assert 5 <= idle_polls <= 15, idle_polls  # ~10 a second, not ~100
    assert caught_up == 28 * OS_PAGE_SIZE  # within one idle poll of the writer moving


def test_new_file_without_space_is_refused_and_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(StoreError):
        MappedFile(tmp_path / f"{0:020d}", SIZE)
    assert not (tmp_path / f"{0:020d}").exists()  # no half-made file for the next load
    q = MappedFileQueue(tmp_path / "q", SIZE)
    with pytest.raises(StoreError):
        q.get_last_mapped_file()
    assert q.mapped_files == []


def test_commit_log_reports_create_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from lakemq.store.commit_log import CommitLog
    from lakemq.store.config import StoreConfig
    from lakemq.store.results import PutMessageStatus
    from tests.store.store_helpers import make_message

    cl = CommitLog(StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SIZE,
                               max_message_size=1024))
    cl.load()
    cl.recover_normally()
    cl.start()

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    result = cl.put(MessagesPut.of(make_message()))
    assert result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED and result.remark
    monkeypatch.undo()
    assert cl.put(MessagesPut.of(make_message())).is_ok  # space back: puts go on
    cl.shutdown()
