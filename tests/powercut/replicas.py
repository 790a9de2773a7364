"""What the power-cut harness reads of a replica's CommitLog: the bytes of a range of offsets,
and the messages in it by queue offset, straight from the store's files on a mount (through
the mount: a broker writes through shared mappings, and pages the kernel has not yet handed
to lazyfs are only in the mount's page cache)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lakemq.common.record import MESSAGE_MAGIC_CODE, decode_record
from lakemq.errors import RecordError

__all__ = ["QueueSlot", "read_range", "records"]

QueueSlot = tuple[str, int, int]  # topic, queue id, queue offset


def _files(commit_log: Path, start: int, end: int) -> Iterator[tuple[int, Path]]:
    """The CommitLog files (named by their first offset) holding offsets in [start, end)."""
    paths = sorted(commit_log.iterdir(), key=lambda p: int(p.name))
    for i, path in enumerate(paths):
        first = int(path.name)
        nxt = int(paths[i + 1].name) if i + 1 < len(paths) else None
        if first < end and (nxt is None or nxt > start):
            yield first, path


def read_range(commit_log: Path, start: int, end: int) -> bytes:
    """The CommitLog's bytes at offsets [start, end) (short if a file is missing or short)."""
    out = bytearray()
    for first, path in _files(commit_log, start, end):
        with open(path, "rb") as f:
            lo = max(start, first)
            f.seek(lo - first)
            out += f.read(end - lo)
    return bytes(out)


def records(commit_log: Path, start: int, end: int) -> Iterator[tuple[int, QueueSlot, bytes]]:
    """Every message record starting in [start, end), ``start`` a record boundary: its
    physical offset, its queue slot and its body. A file's records stop at its blank tail."""
    for first, path in _files(commit_log, start, end):
        data = path.read_bytes()
        pos = max(start, first) - first
        while first + pos < end and pos + 8 <= len(data):
            if int.from_bytes(data[pos + 4:pos + 8], "big") != MESSAGE_MAGIC_CODE:
                break  # the blank record that ends a file, or the end of what was written
            try:
                msg = decode_record(data, pos)
            except RecordError as exc:
                raise RecordError(f"{path.name}: {exc}") from exc
            yield first + pos, (msg.topic, msg.queue_id, msg.queue_offset), msg.body
            pos += int.from_bytes(data[pos:pos + 4], "big")
