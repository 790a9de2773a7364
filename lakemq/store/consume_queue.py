"""ConsumeQueue: the per topic and queue index into the CommitLog (RocketMQ 4.x format).

Files live at ``consumequeue/{topic}/{queueId}/{20-digit start offset}``, 300,000 entries
each by default. Entry ``i`` of the queue (its logical, or queue, offset) sits at byte
``i * 20``::

    +------------------------------+------------+------------------------------+
    | commit log offset (8)        |  size (4)  | tags code (8)                |
    +------------------------------+------------+------------------------------+
    0                              8            12                             20

The tags code is the Java hashCode of the TAGS property, or the delivery time in ms for a
queue of SCHEDULE_TOPIC_XXXX. A *blank* entry (offset 0, size 0x7fffffff, code 0) stands for
no message: it pads a queue's first file up to its first entry when the queue starts past
offset 0 (older files expired) and fills a gap, so entry ``i`` always sits at ``i * 20``.
Readers skip blank entries.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

from lakemq.common.validation import check_topic
from lakemq.errors import InvalidNameError, StoreError
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue

__all__ = ["BLANK_UNIT_SIZE", "CQ_STORE_UNIT_SIZE", "ConsumeQueue", "CqUnit", "check_queue_id"]

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE: Final = 20
BLANK_UNIT_SIZE: Final = 0x7FFFFFFF
MAX_QUEUE_ID: Final = 0x7FFFFFFF

_UNIT = struct.Struct(">qiq")
_BLANK: Final = _UNIT.pack(0, BLANK_UNIT_SIZE, 0)
# How many files back a normal recovery starts walking (RocketMQ: the third-last).
_RECOVER_FILES: Final = 3


class CqUnit(NamedTuple):
    commit_log_offset: int
    size: int
    tags_code: int

    @property
    def is_blank(self) -> bool:
        return self.size == BLANK_UNIT_SIZE


def check_queue_id(queue_id: int) -> int:
    """Return ``queue_id`` or raise InvalidNameError (a ValueError): it becomes a directory name."""
    if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not 0 <= queue_id <= MAX_QUEUE_ID:
        raise InvalidNameError(f"queue id must be an int in [0, {MAX_QUEUE_ID}], got {queue_id!r}")
    return queue_id


def _is_valid(offset: int, size: int) -> bool:
    return offset >= 0 and size > 0


def _last_entry_valid(mf: MappedFile) -> bool:
    with mf.raw_view() as view:
        offset, size, _tags = _UNIT.unpack_from(view, mf.file_size - CQ_STORE_UNIT_SIZE)
    return _is_valid(offset, size)


class ConsumeQueue:
    """One topic-queue index. One writer (the dispatcher); readers on any thread."""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        root_dir: Path,
        mapped_file_size: int,
        store_timestamp_of: Callable[[int, int], int],
    ) -> None:
        """``store_timestamp_of(commit_log_offset, size)`` reads a record's store timestamp
        from the CommitLog, -1 when the record is gone."""
        self.topic = check_topic(topic)
        self.queue_id = check_queue_id(queue_id)
        if mapped_file_size <= 0 or mapped_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"ConsumeQueue file size {mapped_file_size} is not a multiple of 20")
        self.store_dir = Path(root_dir) / self.topic / str(self.queue_id)
        self.mapped_file_size = mapped_file_size
        self.mapped_file_queue = MappedFileQueue(self.store_dir, mapped_file_size)
        self._store_timestamp_of = store_timestamp_of
        self.max_physic_offset = 0  # CommitLog end of the newest entry
        self.min_logic_offset = 0  # byte offset of the first live entry

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}, {self.queue_id})"

    # -- load and recovery -------------------------------------------------------------------

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    def recover(self) -> None:
        """Walk entries from the third-last file, or from an earlier one a power cut left
        incomplete, and cut the queue at the first invalid entry (a torn or never-written
        tail)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        start = max(0, len(files) - _RECOVER_FILES)
        # Files are flushed in order, each whole: one whose last entry is valid was flushed
        # and so were all before it. A cut can leave more than three newer files created but
        # never flushed (zeros); starting behind them would keep a hole inside the queue,
        # where the replay cannot rebuild the entries of messages the CommitLog still holds.
        while start > 0 and not _last_entry_valid(files[start - 1]):
            start -= 1
        process_offset = files[start].file_from_offset
        max_physic = 0
        for mf in files[start:]:
            pos = 0
            for offset, size, _tags in _UNIT.iter_unpack(mf.raw_view()):
                if not _is_valid(offset, size):
                    break
                if size != BLANK_UNIT_SIZE:
                    max_physic = offset + size
                pos += CQ_STORE_UNIT_SIZE
            process_offset = mf.file_from_offset + pos
            if pos < mf.file_size:
                break
        self.max_physic_offset = max_physic
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        self.mapped_file_queue.set_positions(process_offset)
        if self.max_physic_offset == 0:
            self.max_physic_offset = self._last_entry_end()

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop every entry pointing at or past ``phy_offset`` (the CommitLog was cut there)."""
        cut: int | None = None
        for mf in reversed(self.mapped_file_queue.mapped_files):
            pos = 0 if mf.wrote_position == 0 else self._first_unit_at_or_after(mf, phy_offset)
            if pos is None:
                break
            cut = mf.file_from_offset + pos
            if pos > 0:
                break
        if cut is None:
            return
        if cut <= self.mapped_file_queue.get_min_offset():
            self.mapped_file_queue.destroy()
            self.min_logic_offset = 0
        else:
            self.mapped_file_queue.truncate_dirty_files(cut)
        self.max_physic_offset = self._last_entry_end()

    @staticmethod
    def _first_unit_at_or_after(mf: MappedFile, phy_offset: int) -> int | None:
        pos = 0
        for offset, size, _tags in _UNIT.iter_unpack(mf.select(0)):
            if size != BLANK_UNIT_SIZE and offset + size > phy_offset:
                return pos
            pos += CQ_STORE_UNIT_SIZE
        return None

    def _last_entry_end(self) -> int:
        offset: int
        size: int
        for mf in reversed(self.mapped_file_queue.mapped_files):
            view = mf.select(0)
            for pos in range(len(view) - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):
                offset, size, _ = _UNIT.unpack_from(view, pos)
                if size != BLANK_UNIT_SIZE:
                    return offset + size
        return 0

    # -- writing -----------------------------------------------------------------------------

    def put_message_position_info(self, commit_log_offset: int, size: int, tags_code: int, cq_offset: int) -> None:
        """Write entry ``cq_offset``. Re-dispatching an entry already written is a no-op (the
        abnormal recovery replays part of the CommitLog); a gap is filled with blank entries
        so the entry still lands at ``cq_offset * 20``."""
        if commit_log_offset + size <= self.max_physic_offset:
            return
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        if not mfq.mapped_files:
            current = expect - expect % self.mapped_file_size
            self.min_logic_offset = expect
            mfq.flushed_where = current
        else:
            current = mfq.get_max_offset()
            if expect < current:
                log.warning("%s: entry %d is already built (queue end %d); skipped", self, cq_offset,
                            current // CQ_STORE_UNIT_SIZE)
                return
            if expect > current:
                log.warning("%s: entries %d..%d missing; filled with blank entries", self,
                            current // CQ_STORE_UNIT_SIZE, cq_offset - 1)
        self._fill_blank(current, expect)
        mf = self._writable_file(expect)
        mf.append(_UNIT.pack(commit_log_offset, size, tags_code))
        self.max_physic_offset = commit_log_offset + size

    def _fill_blank(self, current: int, expect: int) -> None:
        """Blank entries from byte ``current`` (the queue's end) up to ``expect``."""
        while current < expect:
            mf = self._writable_file(current)
            n = min(expect - current, mf.remaining())
            mf.append(_BLANK * (n // CQ_STORE_UNIT_SIZE))
            current += n

    def continue_at(self, cq_offset: int) -> bool:
        """Make ``cq_offset`` the queue's next offset if the queue ends below it (its earlier
        entries are gone with their CommitLog files): blank entries fill up to it, a new
        queue starting in the file that holds it; an empty file there when it falls on a file
        boundary. The min offset is then ``cq_offset`` too. Returns whether anything changed."""
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        if mfq.mapped_files:
            current = mfq.get_max_offset()
            if expect <= current:
                return False
        else:
            current = expect - expect % self.mapped_file_size
            self.min_logic_offset = expect
            mfq.flushed_where = current
            if current == expect:
                self._writable_file(expect)
                return True
        self._fill_blank(current, expect)
        return True

    def put_message_position_infos(self, cq_offset: int, units: bytes) -> None:
        """put_message_position_info for the packed entries ``units`` (20 bytes each, rising
        CommitLog offsets) of queue offsets ``cq_offset``, ``cq_offset + 1``, ...: the part
        that follows on from the queue's end is copied in one go per file; anything else (a
        gap, a replayed entry) takes the one-entry path."""
        view = memoryview(units)
        n = len(units) // CQ_STORE_UNIT_SIZE
        i = 0
        while i < n:
            offset, size, tags_code = _UNIT.unpack_from(units, i * CQ_STORE_UNIT_SIZE)
            mf = self.mapped_file_queue.get_last_mapped_file(need_create=False)
            if (mf is None or offset + size <= self.max_physic_offset or mf.remaining() < CQ_STORE_UNIT_SIZE
                    or mf.file_from_offset + mf.wrote_position != (cq_offset + i) * CQ_STORE_UNIT_SIZE):
                self.put_message_position_info(offset, size, tags_code, cq_offset + i)
                i += 1
                continue
            count = min(n - i, mf.remaining() // CQ_STORE_UNIT_SIZE)
            mf.append(view[i * CQ_STORE_UNIT_SIZE : (i + count) * CQ_STORE_UNIT_SIZE])
            last_offset, last_size, _ = _UNIT.unpack_from(units, (i + count - 1) * CQ_STORE_UNIT_SIZE)
            self.max_physic_offset = last_offset + last_size
            i += count

    def _writable_file(self, offset: int) -> MappedFile:
        mf = self.mapped_file_queue.get_last_mapped_file(offset)
        if mf is None:
            raise StoreError(f"{self}: cannot create a file at {offset}")
        return mf

    # -- reading -----------------------------------------------------------------------------

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        """One past the newest entry: the queue offset the next message gets."""
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_unit(self, index: int) -> CqUnit | None:
        units = self.read_units(index, 1)
        return units[0] if units else None

    def read_units(self, index: int, max_count: int) -> list[CqUnit]:
        """Up to ``max_count`` entries from ``index`` on, within the file holding ``index``
        (blank entries included, so the caller can count its way forward)."""
        offset = index * CQ_STORE_UNIT_SIZE
        if index < 0 or offset < self.min_logic_offset:
            return []
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return []
        pos = offset - mf.file_from_offset
        view = mf.select(pos, max_count * CQ_STORE_UNIT_SIZE)
        whole = len(view) - len(view) % CQ_STORE_UNIT_SIZE
        return [CqUnit(*u) for u in _UNIT.iter_unpack(view[:whole])]

    def entries_view(self, index: int, max_count: int) -> memoryview | None:
        """read_units' entries as their bytes: up to ``max_count`` whole entries from ``index``
        within the file holding it (a view into the mapped file); None where read_units finds
        none."""
        offset = index * CQ_STORE_UNIT_SIZE
        if index < 0 or offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        view = mf.select(offset - mf.file_from_offset, max_count * CQ_STORE_UNIT_SIZE)
        whole = len(view) - len(view) % CQ_STORE_UNIT_SIZE
        return view[:whole] if whole else None

    def get_offset_in_queue_by_time(self, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms);
        the max offset when every message is older."""
        return self._first_reaching(lambda u: self._store_timestamp_of(u.commit_log_offset, u.size), timestamp)

    def offset_at_phy(self, phy_offset: int) -> int:
        """The first queue offset whose record starts at or after CommitLog ``phy_offset``;
        the max offset when none does (how many messages of this queue a CommitLog range
        holds is the difference of two)."""
        return self._first_reaching(lambda u: u.commit_log_offset, phy_offset)

    def _first_reaching(self, key: Callable[[CqUnit], int], value: int) -> int:
        """Binary search for the first entry whose ``key`` (growing along the queue) is at
        least ``value``; a blank entry takes the next non-blank one's key."""
        low, high = self.get_min_offset_in_queue(), self.get_max_offset_in_queue()
        while low < high:
            mid = (low + high) // 2
            if self._key_at(mid, high, key) < value:
                low = mid + 1
            else:
                high = mid
        return low

    def _key_at(self, index: int, end: int, key: Callable[[CqUnit], int]) -> int:
        """``key`` of entry ``index``, or of the next non-blank one (-1: none, or gone)."""
        while index < end:
            unit = self.get_unit(index)
            if unit is None:
                return -1
            if not unit.is_blank:
                return key(unit)
            index += 1
        return -1

    # -- expiry ------------------------------------------------------------------------------

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the queue's first live entry to the first one whose record is still in the
        CommitLog (whose files below ``phy_min_offset`` are gone)."""
        for mf in self.mapped_file_queue.mapped_files:
            pos = self._first_unit_at_or_after(mf, phy_min_offset)
            if pos is not None:
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + pos)
                return
        self.min_logic_offset = max(self.min_logic_offset, self.mapped_file_queue.get_max_offset())

    def delete_expired_file(self, phy_min_offset: int) -> int:
        """Delete whole files whose entries all point below ``phy_min_offset``."""
        # The min moves first: a reader checking it never looks for an entry in a file that
        # is already gone.
        self.correct_min_offset(phy_min_offset)
        return self.mapped_file_queue.delete_expired_file_by_offset(phy_min_offset, CQ_STORE_UNIT_SIZE)

    # -- lifecycle ---------------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
        self.max_physic_offset = 0
        self.min_logic_offset = 0
