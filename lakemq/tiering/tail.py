"""The untiered tail: what a broker's store holds past the lake's end, and why it waits.

``tier run`` commits only sealed ranges, and the last CommitLog file is sealed once it is full
or idle for ``tierSealIdleMs``; until then its bytes wait. A run that commits nothing says
which bytes wait and when they will be sealed; ``tier status`` and the console show the tail
(bytes and messages past the lake's end), so "committed 0 range(s)" is never unexplained.
"""

from __future__ import annotations

import mmap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lakemq.tiering.seal import CommitLogFile, commitlog_files, load_seals
from lakemq.tiering.walk import walk_records

__all__ = ["UntieredTail", "WaitingBytes", "untiered_tail"]


@dataclass(frozen=True, slots=True)
class WaitingBytes:
    """Records of one CommitLog file not sealed yet (so not in the lake either)."""

    file_name: str
    start: int  # CommitLog offset of the first waiting byte
    end: int  # the end of its last record
    messages: int
    last: bool  # the file being written: sealed when full or idle
    seal_at_ms: int | None  # when idleness seals it (last file only)

    @property
    def bytes(self) -> int:
        return self.end - self.start

    def why(self, idle_ms: int) -> str:
        """One line: what waits and until when."""
        head = f"{self.bytes:,} bytes ({self.messages:,} messages) in {self.file_name}"
        if not self.last or self.seal_at_ms is None:
            return f"{head} are sealed by the next run (the file is full)"
        at = datetime.fromtimestamp(self.seal_at_ms / 1000).strftime("%H:%M:%S")
        return (f"{head} wait for the file to fill or to idle for tierSealIdleMs ({_duration(idle_ms)}, "
                f"at {at})")


@dataclass(frozen=True, slots=True)
class UntieredTail:
    lake_end: int  # CommitLog offset the lake holds everything below (the manifest's committed end)
    store_end: int  # the end of the store's last record
    messages: int  # records at or past lake_end (sealed but not committed, and unsealed)
    waiting: tuple[WaitingBytes, ...]  # the unsealed part, per file

    @property
    def bytes(self) -> int:
        return max(0, self.store_end - self.lake_end)


def _duration(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _records(f: CommitLogFile, start: int) -> tuple[int, int]:
    """(records, end of the last one) in ``f`` from CommitLog offset ``start`` on."""
    if f.size == 0 or start >= f.end:
        return 0, start
    with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        walk = walk_records(buf, f.start, start - f.start, f.size, verify=False, on_bad="stop")
        return len(walk.starts), f.start + walk.stop


def untiered_tail(store_dir: str | Path, lake_end: int, *, idle_ms: int, now_ms: int | None = None) -> UntieredTail:
    """The store's records past ``lake_end``: sealed ones counted from their seals, unsealed
    ones by walking their files (record headers only)."""
    files = commitlog_files(store_dir)
    seals = load_seals(store_dir)
    sealed_to: dict[int, int] = {}
    messages = 0
    for s in seals:
        sealed_to[s.file_start] = max(sealed_to.get(s.file_start, s.file_start), s.range_end)
        if s.range_start >= lake_end:
            messages += s.rows
    now = int(time.time() * 1000) if now_ms is None else now_ms
    waiting: list[WaitingBytes] = []
    store_end = lake_end
    for i, f in enumerate(files):
        start = max(sealed_to.get(f.start, f.start), lake_end, f.start)
        count, end = _records(f, start)
        store_end = max(store_end, end, min(sealed_to.get(f.start, 0), f.end))
        if count:
            last = i == len(files) - 1
            messages += count
            waiting.append(WaitingBytes(f.path.name, start, end, count, last,
                                        max(now, f.mtime_ms + idle_ms) if last else None))
    return UntieredTail(lake_end, store_end, messages, tuple(waiting))
