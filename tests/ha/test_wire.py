"""The HA protocol's bytes: the master reading offset reports, the slave reading transfers
however the socket splits them, and the slave's cut at whole CommitLog records."""

from __future__ import annotations

import pytest

from lakemq.broker.ha.wire import REPORT, TRANSFER_HEADER, ReportReader, TransferReader, complete_records
from lakemq.common.record import BLANK_MAGIC_CODE, encode_host, encode_record
from lakemq.errors import FrameError


def test_reports_count_only_the_newest_whole_offset() -> None:
    reader = ReportReader()
    stream = REPORT.pack(0) + REPORT.pack(4096) + REPORT.pack(8192)
    assert reader.feed(stream[:5]) is None
    assert reader.feed(stream[5:20]) == 4096  # 8..16 complete, 16..20 is a part of the third
    assert reader.feed(stream[20:23]) is None
    assert reader.feed(stream[23:]) == 8192
    assert reader.feed(REPORT.pack(1 << 40)) == 1 << 40  # 8-byte big-endian, not an int


def _transfer(offset: int, data: bytes) -> bytes:
    return TRANSFER_HEADER.pack(offset, len(data)) + data


@pytest.mark.parametrize("piece", [1, 5, 12, 13, 1000])
def test_transfers_are_collected_whatever_the_socket_splits(piece: int) -> None:
    stream = _transfer(4096, b"a" * 30) + _transfer(4126, b"") + _transfer(4126, b"b" * 7)
    reader = TransferReader()
    reader.expect(4096)
    for i in range(0, len(stream), piece):
        reader.feed(stream[i:i + piece])
    assert bytes(reader.data) == b"a" * 30 + b"b" * 7
    assert (reader.data_offset, reader.next_offset) == (4096, 4133)
    assert (reader.transfers, reader.heartbeats) == (2, 1)
    reader.consumed(30)
    assert (bytes(reader.data), reader.data_offset) == (b"b" * 7, 4126)


def test_a_transfer_not_where_the_slave_ends_is_refused() -> None:
    reader = TransferReader()
    reader.expect(4096)
    with pytest.raises(FrameError, match="master sent offset 4000, but this slave is at 4096"):
        reader.feed(_transfer(4000, b"x"))
    empty = TransferReader()
    empty.expect(None)  # an empty slave takes the first offset the master sends
    empty.feed(_transfer(1 << 30, b"xy"))
    assert empty.next_offset == (1 << 30) + 2
    with pytest.raises(FrameError, match="bad HA transfer header"):
        TransferReader().feed(TRANSFER_HEADER.pack(0, -1))


def _record(body: bytes, offset: int) -> bytes:
    host = encode_host("127.0.0.1:10911")
    return bytes(encode_record(topic=b"TopicA", queue_id=0, body=body, flag=0, properties=b"", sys_flag=0,
                               born_timestamp=1, born_host=host, store_host=host, physical_offset=offset))


def test_only_whole_records_are_complete() -> None:
    first = _record(b"one", 0)
    second = _record(b"two" * 50, len(first))
    blank = (64).to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big") + bytes(56)
    data = first + second + blank
    assert complete_records(data) == len(data)
    assert complete_records(data + first) == len(data)  # the next file's records are applied apart
    assert complete_records(data[: len(first) + 10]) == len(first)
    assert complete_records(data[: len(first) + len(second) + 20]) == len(first) + len(second)  # blank in flight
    assert complete_records(data[:3]) == 0
    with pytest.raises(FrameError, match="not a CommitLog record"):
        complete_records(first + b"\x00" * 16)
    with pytest.raises(FrameError, match="shorter than a record's fixed part"):
        complete_records((40).to_bytes(4, "big") + first[4:])
