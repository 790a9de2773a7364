"""Sealing CommitLog segments: deciding which byte ranges are final and may go to the lake.

A CommitLog file is sealed once it is full (it is not the last file, or it ends in the
blank record), or, for the last file, once nothing was written to it for ``idle_ms``: then
the range up to its last record is sealed and a later seal takes the rest. Asked to seal what
is flushed (``tier run --flushed``, ``tier serve``), it seals up to the last whole record
below the offset the broker's checkpoint says is on disk, whatever the file's age: a range
then ends on a record boundary inside a file, and the next one continues there. Each sealed range
gets a seal file ``{store}/tiering/seals/{range start, 20 digits}.json`` holding

- the range ``[range_start, range_end)`` (``range_end`` is the file end for a full file,
  and the Delta app-transaction version of the commit that carries the range);
- ``boundaries``: the CommitLog offset of the first record starting in every ``stride``
  bytes, so readers split the range into byte ranges that begin on records;
- the row count and digest (:mod:`lakemq.tiering.digest`) of the records, computed from the
  file's bytes with every CRC checked, for verifying the lake later;
- ``corrupt``: byte ranges that hold no valid record (reported; the lake job refuses them
  unless told to skip);
- ``queue_ends``: per topic and queue id, the queue offset after the range's last record of
  that queue (records that take no queue offset, prepared and rolled-back ones, left out).
  The manifest keeps them, so the lake knows where every queue ended even once the local
  files are gone (``lakemq reindex`` continues each queue from there);
- ``store_hosts``: the distinct STORE_HOST ("ip:port") of the range's records. Brokers of
  one topic tier into one table and their queue and CommitLog offsets overlap; the store host
  is what tells a row's broker apart, so the commit records them and readers (verification,
  cold reads, the stream) take only their broker's rows.
"""

from __future__ import annotations

import itertools
import json
import logging
import mmap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lakemq.common.durable import write_file_durably
from lakemq.common.record import BODY_POS, HEAD, packed_host
from lakemq.store.checkpoint import read_flushed_offset
from lakemq.tiering.digest import crc32c_slices, digest_of
from lakemq.tiering.walk import HEADER_DTYPE, Walk, gather, walk_records

__all__ = ["CommitLogFile", "QueueEnds", "SealedSegment", "commitlog_files", "load_seals", "merge_queue_ends",
           "seal_dir", "seal_segments"]

log = logging.getLogger(__name__)

# topic -> {queue id (as a JSON key) -> the queue offset after the last record seen}
QueueEnds = dict[str, dict[str, int]]
# Sys flag bits of the transaction type: prepared (4) and rollback (12) records take no queue offset.
_TRANSACTION_BITS = 0xC
_COMMIT_TYPE = 0x8
_KEY_CHUNK = 1 << 16


def merge_queue_ends(into: QueueEnds, more: QueueEnds) -> QueueEnds:
    """``into`` with ``more``'s ends added, the higher end winning (``into`` is changed)."""
    for topic, queues in more.items():
        mine = into.setdefault(topic, {})
        for queue_id, end in queues.items():
            mine[queue_id] = max(mine.get(queue_id, 0), end)
    return into

@dataclass(frozen=True, slots=True)
class CommitLogFile:
    path: Path
    start: int
    size: int
    mtime_ms: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True, slots=True)
class SealedSegment:
    file_name: str
    file_start: int
    file_size: int
    range_start: int
    range_end: int
    data_end: int  # end of the last record; range_end - data_end is the blank tail
    full: bool
    rows: int
    digest: int
    boundaries: tuple[int, ...]
    corrupt: tuple[tuple[int, int], ...]
    sealed_at_ms: int
    queue_ends: QueueEnds | None = None  # None: sealed before queue ends were recorded
    store_hosts: tuple[str, ...] | None = None  # sorted; None: sealed before store hosts were recorded

    def byte_ranges(self) -> list[tuple[int, int]]:
        """CommitLog offset ranges, each starting on a record, covering the sealed records."""
        edges = [b for b in self.boundaries if b < self.data_end] + [self.data_end]
        return [(a, b) for a, b in itertools.pairwise(edges) if b > a]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> SealedSegment:
        raw = json.loads(text)
        raw["boundaries"] = tuple(raw["boundaries"])
        raw["corrupt"] = tuple(tuple(c) for c in raw["corrupt"])
        if raw.get("store_hosts") is not None:
            raw["store_hosts"] = tuple(raw["store_hosts"])
        return cls(**raw)


def commitlog_files(store_dir: str | Path) -> list[CommitLogFile]:
    directory = Path(store_dir) / "commitlog"
    if not directory.is_dir():
        return []
    files = []
    for path in directory.iterdir():
        if len(path.name) == 20 and path.name.isdigit() and path.is_file():
            st = path.stat()
            files.append(CommitLogFile(path, int(path.name), st.st_size, int(st.st_mtime * 1000)))
    return sorted(files, key=lambda f: f.start)


def seal_dir(store_dir: str | Path) -> Path:
    return Path(store_dir) / "tiering" / "seals"


def load_seals(store_dir: str | Path) -> list[SealedSegment]:
    directory = seal_dir(store_dir)
    if not directory.is_dir():
        return []
    seals = [SealedSegment.from_json(p.read_text()) for p in directory.glob("*.json")]
    return sorted(seals, key=lambda s: s.range_start)


def _write_seal(store_dir: str | Path, seal: SealedSegment) -> None:
    write_file_durably(seal_dir(store_dir) / f"{seal.range_start:020d}.json", seal.to_json())


def _boundaries(starts: np.ndarray, first: int, stop: int, stride: int) -> np.ndarray:
    if not len(starts):
        return starts
    targets = np.arange(first, stop, stride, dtype=np.int64)
    idx = np.unique(np.searchsorted(starts, targets))
    return starts[idx[idx < len(starts)]]


def _digest(buf: mmap.mmap, base: int, starts: np.ndarray) -> int:
    raw = np.frombuffer(buf, dtype=np.uint8)
    body_len = gather(raw, starts + HEAD.size, 4).view(">i4").reshape(-1).astype(np.int64)
    view = memoryview(buf)
    try:
        crcs = crc32c_slices(view, starts + BODY_POS, starts + BODY_POS + body_len)
    finally:
        view.release()
    return digest_of(starts + base, crcs)


def _queue_ends(buf: mmap.mmap, starts: np.ndarray) -> QueueEnds:
    """Per topic and queue id, the queue offset after the last record that takes one. Keys are
    grouped with numpy (topic bytes and queue id as one fixed-width key); only the distinct
    queues reach Python."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    ends: QueueEnds = {}
    for lo in range(0, len(starts), _KEY_CHUNK):
        chunk = starts[lo : lo + _KEY_CHUNK]
        hdr = gather(raw, chunk, BODY_POS).view(HEADER_DTYPE).reshape(-1)
        tx = hdr["sys_flag"] & _TRANSACTION_BITS
        keep = (tx == 0) | (tx == _COMMIT_TYPE)
        chunk, hdr = chunk[keep], hdr[keep]
        if not len(chunk):
            continue
        topic_pos = chunk + BODY_POS + hdr["body_len"].astype(np.int64)
        topic_len = raw[topic_pos].astype(np.int64)
        width = int(topic_len.max()) + 1  # the length byte and the longest topic
        near_end = topic_pos + width > len(raw)  # a window would run past the buffer: done one by one
        window = np.zeros((len(chunk), width), dtype=np.uint8)
        window[~near_end] = gather(raw, topic_pos[~near_end], width)
        for i in np.flatnonzero(near_end):
            window[i, : topic_len[i] + 1] = raw[topic_pos[i] : topic_pos[i] + topic_len[i] + 1]
        window[np.arange(width)[None, :] > topic_len[:, None]] = 0  # bytes past the topic are not the key
        queue_ids = np.ascontiguousarray(hdr["queue_id"]).view(np.uint8).reshape(-1, 4)
        keys = np.ascontiguousarray(np.hstack([window, queue_ids])).view(f"V{width + 4}").ravel()
        _, first_from_end = np.unique(keys[::-1], return_index=True)
        for i in (len(keys) - 1 - first_from_end).tolist():
            topic = bytes(window[i, 1 : topic_len[i] + 1]).decode("utf-8", "replace")
            merge_queue_ends(ends, {topic: {str(int(hdr["queue_id"][i])): int(hdr["queue_offset"][i]) + 1}})
    return ends


def _store_hosts(buf: mmap.mmap, starts: np.ndarray) -> tuple[str, ...]:
    """The sorted distinct STORE_HOSTs of the records at ``starts``, every record counted (the
    lake holds a row for each, prepared and rolled-back ones too)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    packed: set[int] = set()
    for lo in range(0, len(starts), _KEY_CHUNK):
        hdr = gather(raw, starts[lo : lo + _KEY_CHUNK], BODY_POS).view(HEADER_DTYPE).reshape(-1)
        packed.update(np.unique(hdr["store_host"]).tolist())
    return tuple(sorted(packed_host(p) for p in packed))


def _seal_file(f: CommitLogFile, from_offset: int, *, last: bool, idle: bool, stride: int,
               flushed_end: int | None = None) -> SealedSegment | None:
    # With ``flushed_end`` only the bytes below it are read: a record it cuts is the frontier.
    end = f.size if flushed_end is None else min(f.size, flushed_end - f.start)
    cut = end < f.size
    with open(f.path, "rb") as fh:
        if f.size == 0 or end <= from_offset - f.start:
            return None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos = from_offset - f.start
            walk: Walk = walk_records(buf, f.start, pos, end, verify=True, on_bad="resync")
            corrupt = list(walk.corrupt)
            stop = walk.stop
            if (last or cut) and walk.blank_at is None and corrupt and corrupt[-1][1] == end:
                # The writer's frontier: what follows the last good record holds no valid record
                # (unwritten zeros, a torn write, or a record the flushed end cuts). Bad bytes with
                # good records after them are damage.
                stop = corrupt.pop()[0]
            if walk.blank_at is not None:
                data_end, range_end, full = f.start + walk.blank_at, f.end, True
            elif not last and not cut:
                data_end, range_end, full = f.start + stop, f.end, True
            elif (idle or flushed_end is not None) and stop > pos:
                data_end = range_end = f.start + stop
                full = False
            else:
                return None
            starts = walk.starts
            bounds = _boundaries(starts, pos, stop, stride)
            seal = SealedSegment(
                file_name=f.path.name, file_start=f.start, file_size=f.size, range_start=from_offset,
                range_end=range_end, data_end=data_end, full=full, rows=len(starts),
                digest=_digest(buf, f.start, starts), boundaries=tuple(int(b) + f.start for b in bounds),
                corrupt=tuple((a + f.start, b + f.start) for a, b in corrupt), sealed_at_ms=int(time.time() * 1000),
                queue_ends=_queue_ends(buf, starts), store_hosts=_store_hosts(buf, starts),
            )
    for a, b in seal.corrupt:
        log.error("CommitLog %s: no valid record in offsets [%d, %d)", f.path.name, a, b)
    return seal


def seal_segments(
    store_dir: str | Path, *, idle_ms: int, stride: int = 8 << 20, now_ms: int | None = None, from_offset: int = 0,
    flushed: bool = False,
) -> list[SealedSegment]:
    """Seal what became final since the last call; returns the new seals (oldest first).
    Nothing below ``from_offset`` (what the lake holds already) is sealed: a store that did
    not tier those bytes itself (a slave's, after its master was lost) starts there.

    ``flushed``: also seal, without waiting for a file to fill or idle, every whole record
    below the CommitLog offset the broker's checkpoint publishes as on disk
    (:func:`lakemq.store.checkpoint.read_flushed_offset`), and nothing at or above it (a
    store whose checkpoint publishes none seals as without ``flushed``)."""
    limit = read_flushed_offset(Path(store_dir) / "checkpoint") if flushed else 0
    flushed_end = limit if limit > 0 else None
    files = commitlog_files(store_dir)
    sealed_to: dict[int, int] = {}
    for s in load_seals(store_dir):
        sealed_to[s.file_start] = max(sealed_to.get(s.file_start, s.file_start), s.range_end)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    new: list[SealedSegment] = []
    for i, f in enumerate(files):
        start = max(sealed_to.get(f.start, f.start), min(from_offset, f.end))
        if start >= f.end:
            continue
        last = i == len(files) - 1
        if flushed_end is not None and start >= flushed_end:
            break
        seal = _seal_file(f, start, last=last, idle=now - f.mtime_ms >= idle_ms, stride=stride,
                          flushed_end=flushed_end)
        if seal is None:
            continue
        _write_seal(store_dir, seal)
        log.info("sealed CommitLog [%d, %d): %d records", seal.range_start, seal.range_end, seal.rows)
        new.append(seal)
    return new
