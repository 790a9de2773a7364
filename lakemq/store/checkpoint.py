"""StoreCheckpoint: how far each part of the store is known to be on disk.

RocketMQ's layout: a 4 KiB file holding three big-endian longs::

    0  physicMsgTimestamp   store time of a CommitLog record known to be flushed
    8  logicsMsgTimestamp   store time of a record whose ConsumeQueue entry is flushed
    16 indexMsgTimestamp    store time of a record whose IndexFile entry is flushed

lakemq adds, at 40 (past RocketMQ 5's masterFlushedOffset and confirmPhyOffset), the CommitLog
offset up to which the CommitLog is known to be on disk, and at 48 the same value with every
bit flipped. It is written to the mapping as soon as a flush moves it (not only at the
checkpoint's own flush), so a tiering process reading the store while the broker runs learns
how far the records are durable (:func:`read_flushed_offset`); the pair lets it tell a whole
value from one it read half written.

After a crash, CommitLog recovery replays from the last file whose first record is older than
``min_timestamp`` (``min_timestamp_index`` when the index must be rebuilt too).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from lakemq.common.durable import create_file_durably, make_dirs_durably
from lakemq.errors import StoreError
from lakemq.store.mapped_file import preallocate

__all__ = ["CHECKPOINT_FILE_SIZE", "StoreCheckpoint", "read_flushed_offset"]

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")
_FLUSHED = struct.Struct(">qq")
_FLUSHED_POS = 40
# RocketMQ steps back 3 s: records stored within the same moment may straddle the flush.
_SAFETY_MARGIN_MS = 3000


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        make_dirs_durably(self.path.parent)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
            # A hole here would take its block at the first flush: a SIGBUS if the disk is full by then.
            preallocate(fd, 0, CHECKPOINT_FILE_SIZE, required=True)
            if created:
                os.fsync(fd)
                create_file_durably(self.path)  # its flushes count on the file being found
            self._mm = mmap.mmap(fd, CHECKPOINT_FILE_SIZE)
        except OSError as exc:
            raise StoreError(f"cannot open checkpoint {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self.physic_msg_timestamp: int
        self.logics_msg_timestamp: int
        self.index_msg_timestamp: int
        (self.physic_msg_timestamp, self.logics_msg_timestamp,
         self.index_msg_timestamp) = _LAYOUT.unpack_from(self._mm, 0)

    def publish_flushed(self, offset: int) -> None:
        """The CommitLog is on disk below ``offset``; called after the fsync that made it so."""
        _FLUSHED.pack_into(self._mm, _FLUSHED_POS, offset, ~offset)

    def min_timestamp(self) -> int:
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - _SAFETY_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        _LAYOUT.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp)
        self._mm.flush()

    def shutdown(self) -> None:
        if not self._mm.closed:
            self.flush()
            self._mm.close()


def read_flushed_offset(path: Path, attempts: int = 5) -> int:
    """The CommitLog offset below which a running (or stopped) broker's CommitLog is on disk,
    as its checkpoint file publishes it; 0 when the file or the value is missing (a store no
    lakemq broker with it has flushed), or no whole value was read in ``attempts`` tries."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        for _ in range(attempts):
            raw = os.pread(fd, _FLUSHED.size, _FLUSHED_POS)  # unbuffered: each try reads the page again
            if len(raw) < _FLUSHED.size:
                return 0
            value: int
            check: int
            value, check = _FLUSHED.unpack(raw)
            if check == ~value and value > 0:
                return value
            if value == 0 and check == 0:
                return 0
    finally:
        os.close(fd)
    return 0
