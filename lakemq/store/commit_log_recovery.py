"""CommitLog recovery at load: find where the good records end, cut the rest.

After a clean shutdown only the last three files are walked; after a crash the walk starts at
the last file whose first record is older than the checkpoint and hands every good record to
dispatch, so the ConsumeQueues and IndexFiles are rebuilt. Either way the log is cut after
the last good record, and files after the cut that start with a good record (damage in the
middle, not a torn tail) are set aside, never deleted. Records are read with
lakemq.store.commit_log_scan.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from lakemq.common.record import MESSAGE_MAGIC_CODE, STORE_TIMESTAMP_POS, check_record
from lakemq.store.commit_log_scan import DispatchRequest, iter_dispatch_requests, scan_valid_end
from lakemq.store.config import StoreConfig
from lakemq.store.delay_levels import DelayLevels
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue

__all__ = ["recover_abnormally", "recover_normally"]

log = logging.getLogger(__name__)

_FIRST_RECORD = struct.Struct(">iI")
_LONG = struct.Struct(">q")
# Scans a file from a position: (the end of its good records, whether a blank record sealed it).
_Scan = Callable[[MappedFile, int], tuple[int, bool]]


def recover_normally(queue: MappedFileQueue, config: StoreConfig) -> int:
    """After a clean shutdown: walk the last three files, stop at the first bad record and
    cut there. Returns the recovered end (the CommitLog max offset)."""
    check_crc = config.check_crc_on_recover

    def scan(mf: MappedFile, pos: int) -> tuple[int, bool]:
        return scan_valid_end(mf.raw_view(), pos, mf.file_from_offset, check_crc=check_crc)

    return _recover_from(queue, config, max(0, len(queue.mapped_files) - 3), scan)


def recover_abnormally(queue: MappedFileQueue, config: StoreConfig, levels: DelayLevels, min_timestamp: int,
                       dispatch: Callable[[DispatchRequest], None]) -> int:
    """After a crash: replay from the last file whose first record was stored at or before
    ``min_timestamp`` (the checkpoint's), handing every good record to ``dispatch`` so the
    ConsumeQueues and IndexFile are rebuilt; cut after the last good record."""
    files = queue.mapped_files
    index = len(files) - 1
    while index > 0 and not _is_recover_start(files[index], min_timestamp):
        index -= 1
    check_crc = config.check_crc_on_recover

    def scan(mf: MappedFile, pos: int) -> tuple[int, bool]:
        for req in iter_dispatch_requests(mf.raw_view(), pos, mf.file_from_offset,
                                          check_crc=check_crc, delay_levels=levels):
            if req.msg_size > 0:
                dispatch(req)
                pos += req.msg_size
            else:
                return pos, req.msg_size == 0
        raise AssertionError("iter_dispatch_requests ends with a blank or bad record")

    return _recover_from(queue, config, max(index, 0), scan)


def _is_recover_start(mf: MappedFile, min_timestamp: int) -> bool:
    view = mf.raw_view()
    _, magic = _FIRST_RECORD.unpack_from(view, 0)
    if magic != MESSAGE_MAGIC_CODE:
        return False
    store_timestamp: int = _LONG.unpack_from(view, STORE_TIMESTAMP_POS)[0]
    return 0 < store_timestamp <= min_timestamp


def _set_aside_good_files(queue: MappedFileQueue, config: StoreConfig, later: list[MappedFile],
                          process_offset: int) -> None:
    """Files after the recovered end that start with a good record mean damage in the
    middle of the log, not a torn tail. They leave the log (it must be contiguous) but are
    moved to ``commitlog.cut/{offset}/`` instead of deleted: nothing that reached the disk
    is destroyed by recovery."""
    good = []
    for mf in later:
        with mf.raw_view() as view:
            if check_record(view, 0, check_crc=True, physical_offset=mf.file_from_offset) > 0:
                good.append(mf)
    if good:
        directory = config.root_dir / "commitlog.cut" / f"{process_offset:020d}"
        log.error("CommitLog damaged at offset %d with %d good file(s) after it: moved to %s",
                  process_offset, len(good), directory)
        queue.set_aside(good, directory)


def _recover_from(queue: MappedFileQueue, config: StoreConfig, index: int, scan: _Scan) -> int:
    files = queue.mapped_files
    if not files:
        queue.flushed_where = 0
        return 0
    while True:
        mf = files[index]
        end, sealed = scan(mf, 0)
        if sealed and index + 1 < len(files):
            index += 1
            continue
        process_offset = mf.file_from_offset + end
        break
    _set_aside_good_files(queue, config, files[index + 1 :], process_offset)
    log.info("CommitLog recovered to offset %d", process_offset)
    queue.set_positions(process_offset)
    queue.truncate_dirty_files(process_offset)
    return process_offset
