"""CommitLog bytes a slave takes from its master: what complete_records lets it write, then
dispatch's compiled scanner (lakemq.store._scan) and recovery's one-record reader over them,
with the delay-level tags code of SCHEDULE_TOPIC records."""

from __future__ import annotations

from typing import Final

from lakemq.broker.ha.wire import complete_records
from lakemq.common.record import PHYSICAL_OFFSET_POS
from lakemq.errors import FrameError
from lakemq.store.commit_log_scan import read_dispatch_request, read_dispatch_requests, requests_of
from lakemq.store.delay_levels import DelayLevels

ALLOWED: Final = (FrameError,)
DELAY_LEVELS: Final = DelayLevels("1s 5s 10s 30s 1m")


def one_input(data: bytes) -> None:
    if not data:
        return
    mode, stream = data[0], data[1:]
    written = stream[:complete_records(stream)]
    # Records that name their own offset get past the offset check (bit 1), as a slave's do.
    offset = int.from_bytes(written[PHYSICAL_OFFSET_POS:PHYSICAL_OFFSET_POS + 8], "big", signed=True) \
        if mode & 2 and len(written) >= PHYSICAL_OFFSET_POS + 8 else 0
    batch = read_dispatch_requests(written, 0, offset, max_count=64, check_crc=bool(mode & 1),
                                   delay_levels=DELAY_LEVELS if mode & 4 else None)
    requests = requests_of(batch)
    assert len(requests) == len(batch) and batch.end_pos <= len(written)
    assert sum(request.msg_size for request in requests) == batch.end_pos
    batch.arrivals()
    first = read_dispatch_request(written, 0, offset, check_crc=bool(mode & 1))
    assert first.msg_size in (-1, 0) or first.msg_size == requests[0].msg_size
