"""Under SYNC_FLUSH the CommitLog file being appended to is mapped with MADV_RANDOM, so its
page cache holds page-size folios and each group commit writes what was appended, not the
2 MiB large folios Linux 6.x readahead builds (docs/SYNC_FLUSH.md)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus

Open = Callable[..., CommitLog]
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")  # a mapping's first line in smaps


def _vm_flags(path: Path) -> set[str]:
    """The VmFlags of this process's mapping of ``path`` (``rr``: MADV_RANDOM)."""
    mapped = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if _MAPPING.match(line):
            mapped = line.split()[-1] == str(path)
        elif mapped and line.startswith("VmFlags:"):
            return set(line.split()[1:])
    raise AssertionError(f"{path} is not mapped")


def _message(body: bytes) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic="PageTopic", body=body, queue_id=0)


def test_the_appended_file_is_random_access_under_sync_flush(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=64 * 1024)
    cl.start()
    assert cl.put(MessagesPut.of(_message(b"a" * 1000))).status is PutMessageStatus.PUT_OK
    first = cl.mapped_file_queue.mapped_files[0]
    assert "rr" in _vm_flags(first.path)
    while len(cl.mapped_file_queue.mapped_files) < 2:  # roll into a second file
        assert cl.put(MessagesPut.of(_message(b"b" * 1000))).status is PutMessageStatus.PUT_OK
    second = cl.mapped_file_queue.mapped_files[1]
    assert "rr" not in _vm_flags(first.path)  # full: sequential reads get readahead again
    assert "rr" in _vm_flags(second.path)


def test_a_recovered_last_file_is_appended_random_access(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    cl.start()
    assert cl.put(MessagesPut.of(_message(b"a" * 100))).status is PutMessageStatus.PUT_OK
    cl.shutdown()
    again = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    again.recover_normally()
    last = again.mapped_file_queue.mapped_files[-1]
    assert "rr" not in _vm_flags(last.path)  # recovery scans it with readahead
    again.start()
    assert "rr" in _vm_flags(last.path)


def test_async_flush_keeps_large_folios(open_commit_log: Open) -> None:
    cl = open_commit_log(flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    cl.start()
    assert cl.put(MessagesPut.of(_message(b"a" * 100))).status is PutMessageStatus.PUT_OK
    assert "rr" not in _vm_flags(cl.mapped_file_queue.mapped_files[0].path)


def _write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no write_bytes in /proc/self/io")


def test_group_commits_write_about_what_was_appended(open_commit_log: Open) -> None:
    """40 MB in batches of 64 KiB, each flushed on its own: with large folios every
    fdatasync rewrote up to 2 MiB (about 20x the data on Linux 6.18); page-size folios write
    each page about once, plus the page the next batch continues."""
    cl = open_commit_log(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=64 << 20,
                         max_message_size=4 << 20)
    cl.start()
    batch = [_message(b"x" * 1024) for _ in range(64)]
    before, appended = _write_bytes(), 0
    while appended < 40 << 20:
        result = cl.put(MessagesPut.of(*batch))
        assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
        appended += result.append_result.wrote_bytes
    written = _write_bytes() - before
    assert written < 2 * appended, f"{written:,} bytes written for {appended:,} appended"
