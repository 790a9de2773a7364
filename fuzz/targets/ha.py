"""The HA wire protocol: a slave's reports as the master reads them, and the master's transfers
as the slave reads them (TransferReader, fed in two pieces the input chooses) up to the whole
records it would write (complete_records)."""

from __future__ import annotations

from typing import Final

from lakemq.broker.ha.wire import REPORT, ReportReader, TransferReader, complete_records
from lakemq.errors import FrameError

ALLOWED: Final = (FrameError,)


def one_input(data: bytes) -> None:
    if not data:
        return
    cut = data[0] % len(data)
    stream = data[1:]
    reports = ReportReader()
    reports.feed(stream[:cut])
    last = reports.feed(stream[cut:])
    whole = len(stream) - len(stream) % REPORT.size
    assert last is None or last == REPORT.unpack_from(stream, whole - REPORT.size)[0]
    transfers = TransferReader()
    transfers.feed(stream[:cut])
    transfers.feed(stream[cut:])
    end = complete_records(transfers.data)
    assert 0 <= end <= len(transfers.data)
    transfers.consumed(end)
