"""StoreCheckpoint: how far each part of the store is known to be on disk.

RocketMQ's layout: a 4 KiB file holding three big-endian longs::

    0  physicMsgTimestamp   store time of a CommitLog record known to be flushed
    8  logicsMsgTimestamp   store time of a record whose ConsumeQueue entry is flushed
    16 indexMsgTimestamp    store time of a record whose IndexFile entry is flushed

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

__all__ = ["CHECKPOINT_FILE_SIZE", "StoreCheckpoint"]

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")
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
