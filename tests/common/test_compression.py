"""Bodies compressed by the Java client's three compressors (zlib, an LZ4 frame, a streamed
Zstandard frame without its size) read back as sent; anything else is a clear RecordError."""

from __future__ import annotations

import zlib

import lz4.frame
import pytest
import zstandard

from lakemq.common.compression import compression_name, decompress_body
from lakemq.common.record import decode_pulled, decode_record, encode_host, encode_record, iter_records
from lakemq.errors import RecordError

BODY = b"line of a large compressible body\n" * 300


def _zstd_streamed(data: bytes) -> bytes:
    # zstd-jni's ZstdOutputStream writes a frame that does not record its content size.
    compressor = zstandard.ZstdCompressor().compressobj()
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(("sys_flag", "compress", "name"), [
    (0x1, zlib.compress, "ZLIB"),
    (0x301, zlib.compress, "ZLIB"),
    (0x101, lz4.frame.compress, "LZ4"),
    (0x201, _zstd_streamed, "ZSTD"),
])
def test_each_compression_reads_back(sys_flag: int, compress: object, name: str) -> None:
    assert callable(compress)
    assert decompress_body(compress(BODY), sys_flag) == BODY
    assert compression_name(sys_flag) == name


def test_plain_bodies_and_bad_ones() -> None:
    assert decompress_body(b"plain", 0x300) == b"plain"  # the type bits without COMPRESSED
    assert compression_name(0x300) is None
    with pytest.raises(RecordError, match="LZ4 body does not decompress"):
        decompress_body(b"not lz4", 0x101)
    with pytest.raises(RecordError, match="ZSTD body does not decompress"):
        decompress_body(b"not zstd", 0x201)
    with pytest.raises(RecordError, match="unknown body compression type 4"):
        decompress_body(b"x", 0x401)


def test_records_and_pulled_batches_decompress_by_type() -> None:
    stored = lz4.frame.compress(BODY)
    raw = bytes(encode_record(topic=b"T", queue_id=0, body=stored, flag=0, properties=b"", sys_flag=0x101,
                              born_timestamp=1, born_host=encode_host("127.0.0.1:1"),
                              store_host=encode_host("127.0.0.1:2")))
    assert decode_record(raw).body == stored  # as stored
    assert decode_record(raw, decompress=True).body == BODY
    assert [m.body for m in iter_records(raw + raw, decompress=True)] == [BODY, BODY]
    pulled = decode_pulled(raw + raw, None, "0", "2", "MIN_OFFSET", "MAX_OFFSET")  # the client's compiled path
    assert pulled is not None and [m.body for m in pulled] == [BODY, BODY]


def test_lake_rows_decompress_by_type_for_replay_and_the_console() -> None:
    # The lake keeps bodies as stored; the jobs that send them again decompress them.
    import pyarrow as pa

    from lakemq.jobs.replay import _messages

    rows = [(0x101, lz4.frame.compress(BODY)), (0x201, _zstd_streamed(BODY)), (0x301, zlib.compress(BODY)),
            (0, b"plain")]
    page = pa.table({
        "msg_id": [f"M{i}" for i in range(len(rows))], "uniq_key": [f"U{i}" for i in range(len(rows))],
        "body": [body for _, body in rows], "sys_flag": [flag for flag, _ in rows], "flag": [0] * len(rows),
        "store_timestamp": [1] * len(rows), "commitlog_offset": list(range(len(rows))),
        "queue_id": [0] * len(rows),
        "properties": pa.array([[("k", "v")]] * len(rows), type=pa.map_(pa.string(), pa.string())),
    })
    assert [m.body for _, _, m in _messages(page, "Target")] == [BODY, BODY, BODY, b"plain"]
