"""A pull's read of one queue (MessageStore.get_message): ConsumeQueue entries from the pull's
offset, filtered by tags code or on the record, and the CommitLog bytes of those that match,
as stored, within the pull's and the store's transfer limits. The answer's status and next
offset follow RocketMQ's DefaultMessageStore.getMessage.

A filter decided by tags codes alone (or none) is read by compiled code
(lakemq/store/_reads.pyx); the Python loop here reads the rest and is the definition the
compiled read is tested against (tests/store/test_reads.py).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

from lakemq.store._reads import gather_records
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue, CqUnit
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.filter import MessageFilter
from lakemq.store.get_results import GetMessageResult, GetMessageStatus

__all__ = ["QueueReader"]

# RocketMQ reads at most this many ConsumeQueue entries per pull while filtering.
_MAX_FILTER_ENTRIES = 16_000
# Answers whose next offset is a correction rather than where reading stopped.
_CORRECTED = frozenset({
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL})


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def _iter_units(cq: ConsumeQueue, offset: int, limit: int, chunk: int) -> Iterator[CqUnit]:
    """Up to ``limit`` entries from ``offset``, read ``chunk`` at a time, within one file."""
    read = 0
    while read < limit:
        want = min(chunk, limit - read)
        units = cq.read_units(offset + read, want)
        yield from units
        read += len(units)
        if len(units) < want:
            return


class QueueReader:
    """Reads pulls from ``consume_queues`` and ``commit_log``. With ``keeps_offsets`` (a
    slave that does not check offsets) an answer never corrects the consumer's offset."""

    def __init__(self, config: StoreConfig, consume_queues: ConsumeQueueStore, commit_log: CommitLog, *,
                 keeps_offsets: bool) -> None:
        self._config = config
        self._consume_queues = consume_queues
        self._commit_log = commit_log
        self._keeps_offsets = keeps_offsets
        # False (RocketMQ): entries whose CommitLog file is gone are skipped, as their records
        # are lost. True when the deleted files are held elsewhere (a lake the broker reads):
        # a read stops at the first such entry, its offset next, for the caller to serve.
        self.stops_at_removed = False
        # Records further than this behind the CommitLog's end are read from disk, not memory.
        self._memory_limit = _total_physical_memory() * config.access_message_in_memory_max_ratio // 100

    def get_message(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    message_filter: MessageFilter | None, max_total_bytes: int) -> GetMessageResult:
        """See MessageStore.get_message."""
        cq = self._consume_queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                                    next_begin_offset=offset if self._keeps_offsets else 0)
        min_offset, max_offset = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, offset, min_offset, max_offset)
        if max_offset == 0:
            result.next_begin_offset = 0
        elif offset < min_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
        elif offset == max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
        elif offset > max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            result.next_begin_offset = min_offset if min_offset == 0 else max_offset
        else:
            self._read_queue(cq, offset, max_msg_nums, message_filter, max_total_bytes, result)
        if self._keeps_offsets and result.status in _CORRECTED:
            # A slave may be behind its master: it does not move a consumer's offset.
            result.next_begin_offset = offset
        return result

    def _read_queue(self, cq: ConsumeQueue, offset: int, max_msg_nums: int, message_filter: MessageFilter | None,
                    max_total_bytes: int, result: GetMessageResult) -> None:
        limit = max(_MAX_FILTER_ENTRIES, max_msg_nums * 20)
        code_set = getattr(message_filter, "code_set", None)
        if (message_filter is None or code_set is not None) and self._gather(
                cq, offset, limit, max_msg_nums, None if code_set is None else code_set(), max_total_bytes, result):
            return
        units = _iter_units(cq, offset, limit, max(32, max_msg_nums))
        first = next(units, None)
        if first is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = (
                cq.mapped_file_queue.roll_next_file(offset * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
            )
            return
        result.status = GetMessageStatus.NO_MATCHED_MESSAGE
        commit_log = self._commit_log
        max_phy = commit_log.get_max_offset()
        next_file_start = -1
        read = 0
        last_phy = 0
        for unit in itertools.chain((first,), units):
            if unit.is_blank:
                read += 1
                continue
            offset_py, size_py = unit.commit_log_offset, unit.size
            if offset_py < next_file_start:
                read += 1
                continue
            last_phy = offset_py
            if self._is_batch_full(size_py, max_msg_nums, max_total_bytes, result, max_phy - offset_py > self._memory_limit):
                break
            read += 1
            if message_filter is not None and not message_filter.is_matched_by_consume_queue(unit.tags_code, None):
                continue
            record = commit_log.get_message(offset_py, size_py)
            if record is None:
                if result.buffer_total_size == 0:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                if self.stops_at_removed:
                    read -= 1
                    break
                next_file_start = commit_log.roll_next_file(offset_py)
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(record, None):
                continue
            result.add(record)
            result.status = GetMessageStatus.FOUND
            next_file_start = -1
        result.next_begin_offset = offset + read
        result.suggest_pulling_from_slave = max_phy - last_phy > self._memory_limit

    def _gather(self, cq: ConsumeQueue, offset: int, limit: int, max_msg_nums: int, codes: frozenset[int] | None,
                max_total_bytes: int, result: GetMessageResult) -> bool:
        """The read of _read_queue in compiled code (lakemq/store/_reads.pyx), for a filter
        decided by tags codes alone; False when it leaves the read to Python."""
        entries = cq.entries_view(offset, limit)
        if entries is None:
            return False
        c = self._config
        max_phy = self._commit_log.get_max_offset()
        got = gather_records(entries, codes, max_msg_nums, max_total_bytes, max_phy, self._memory_limit,
                             c.max_transfer_bytes_on_message_in_disk, c.max_transfer_count_on_message_in_disk,
                             c.max_transfer_bytes_on_message_in_memory, c.max_transfer_count_on_message_in_memory,
                             self._commit_log.view_of)
        if got is None:
            return False
        body, count, read, last_phy = got
        if count:
            result.set_body(body, count)
            result.status = GetMessageStatus.FOUND
        else:
            result.status = GetMessageStatus.NO_MATCHED_MESSAGE
        result.next_begin_offset = offset + read
        result.suggest_pulling_from_slave = max_phy - last_phy > self._memory_limit
        return True

    def _is_batch_full(self, size: int, max_msg_nums: int, max_total_bytes: int, result: GetMessageResult,
                       in_disk: bool) -> bool:
        total, count = result.buffer_total_size, result.msg_count
        if total == 0 or count == 0:
            return False
        if count >= max_msg_nums or total + size > max_total_bytes:
            return True
        c = self._config
        if in_disk:
            return total + size > c.max_transfer_bytes_on_message_in_disk or count >= c.max_transfer_count_on_message_in_disk
        return total + size > c.max_transfer_bytes_on_message_in_memory or count >= c.max_transfer_count_on_message_in_memory
