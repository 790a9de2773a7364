"""The HA wire protocol of RocketMQ 4.x (store/ha/HAService, HAConnection): one plain TCP
connection per slave, no RemotingCommand framing, every integer big endian.

- slave -> master: its CommitLog max offset, 8 bytes. The first report says where the slave
  wants the bytes from (0: from the start of the master's last CommitLog file); then one after
  every chunk it applied and one every ``haSendHeartbeatInterval``.
- master -> slave: transfers ``{phyOffset 8, size 4, data}``, the master's CommitLog bytes
  from ``phyOffset``. A transfer never crosses a CommitLog file. ``size`` 0 is a heartbeat,
  sent after ``haSendHeartbeatInterval`` without a transfer.

This module only turns bytes into those messages and back; the connections are
:mod:`lakemq.broker.ha.master` and :mod:`lakemq.broker.ha.slave`.
"""

from __future__ import annotations

import struct
from typing import Final

from lakemq.common.record import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, RECORD_FIXED_SIZE
from lakemq.errors import FrameError

__all__ = ["REPORT", "TRANSFER_HEADER", "ReportReader", "TransferReader", "complete_records"]

REPORT: Final = struct.Struct(">q")
TRANSFER_HEADER: Final = struct.Struct(">qi")
_RECORD_HEAD: Final = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
_BLANK_MIN: Final = 8  # a blank record can be its head alone (the CommitLog keeps 8 bytes spare)


class ReportReader:
    """The master's side: bytes in, the newest whole report out. As RocketMQ does, only the
    last complete 8-byte offset of what arrived counts; earlier ones are superseded."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> int | None:
        """The newest offset completed by ``data`` (None when none was)."""
        buf = self._partial + data if self._partial else data
        whole = len(buf) - len(buf) % REPORT.size
        self._partial = bytes(buf[whole:])
        if whole == 0:
            return None
        offset: int = REPORT.unpack_from(buf, whole - REPORT.size)[0]
        return offset


class TransferReader:
    """The slave's side: bytes in, the transferred CommitLog bytes collected in ``data``
    (starting at CommitLog offset ``data_offset``). A transfer must start where the previous
    one ended (or where ``expect`` said), else FrameError: the slave then drops the link, as
    RocketMQ's does when the master's phyOffset is not its own max offset."""

    __slots__ = ("_head", "_remaining", "data", "data_offset", "heartbeats", "transfers")

    def __init__(self) -> None:
        self._head = bytearray()
        self._remaining = 0
        self.data = bytearray()
        self.data_offset: int | None = None  # None: the next transfer may start anywhere
        self.transfers = 0
        self.heartbeats = 0

    def expect(self, offset: int | None) -> None:
        """Where the next transfer must start (None: anywhere, for an empty slave)."""
        self.data_offset = offset
        self.data.clear()

    def consumed(self, size: int) -> None:
        """The first ``size`` bytes of ``data`` were applied: drop them."""
        del self.data[:size]
        if self.data_offset is not None:
            self.data_offset += size

    @property
    def next_offset(self) -> int | None:
        return None if self.data_offset is None else self.data_offset + len(self.data)

    def feed(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        i, n = 0, len(view)
        while i < n:
            if self._remaining == 0:
                take = min(TRANSFER_HEADER.size - len(self._head), n - i)
                self._head += view[i:i + take]
                i += take
                if len(self._head) < TRANSFER_HEADER.size:
                    break
                offset, size = TRANSFER_HEADER.unpack(self._head)
                self._head.clear()
                self._begin(offset, size)
                continue
            take = min(self._remaining, n - i)
            self.data += view[i:i + take]
            self._remaining -= take
            i += take

    def _begin(self, offset: int, size: int) -> None:
        if size < 0 or offset < 0:
            raise FrameError(f"bad HA transfer header: offset {offset}, size {size}")
        expected = self.next_offset
        if expected is None:
            self.data_offset = offset
        elif offset != expected:
            raise FrameError(f"the master sent offset {offset}, but this slave is at {expected}")
        if size == 0:
            self.heartbeats += 1
        else:
            self.transfers += 1
        self._remaining = size


def complete_records(data: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The end of the whole CommitLog records in ``data`` from ``pos`` (a record boundary),
    up to and including a blank record, which ends its file: what follows belongs to the next
    file and is written there. Raises FrameError on bytes that are not a record, so a slave
    never writes them into its CommitLog."""
    n = len(data)
    unpack = _RECORD_HEAD.unpack_from
    while pos + _RECORD_HEAD.size <= n:
        size, magic = unpack(data, pos)
        if magic == MESSAGE_MAGIC_CODE:
            if size < RECORD_FIXED_SIZE:
                raise FrameError(f"record of {size} bytes at +{pos} is shorter than a record's fixed part")
        elif magic == BLANK_MAGIC_CODE:
            if size < _BLANK_MIN:
                raise FrameError(f"blank record of {size} bytes at +{pos}")
            return pos + size if pos + size <= n else pos
        else:
            raise FrameError(f"bytes at +{pos} are not a CommitLog record (magic 0x{magic:08x})")
        if pos + size > n:
            break
        pos += size
    return pos
