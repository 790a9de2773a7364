"""CommitLog records as a pull response carries them to a client: the compiled decoder
(decode_pulled, None for whatever it leaves to the checks), then decode_record / iter_records
(with CRC check and zlib decompression), check_record (recovery's), and the offset message id."""

from __future__ import annotations

from typing import Final

from lakemq.common import record
from lakemq.errors import RecordError

ALLOWED: Final = (RecordError,)
TAGS: Final = frozenset({"TagA", "TagB"})


def one_input(data: bytes) -> None:
    if not data:
        return
    mode, body = data[0], data[1:]
    record.decode_pulled(body, TAGS if mode & 1 else None, "0", "9", "MIN_OFFSET", "MAX_OFFSET")
    size = record.check_record(body, 0, check_crc=bool(mode & 2))
    assert size >= -1
    try:
        list(record.iter_records(body, check_crc=bool(mode & 2), decompress=True))
    except RecordError:
        pass
    if len(body) == 32:
        record.decode_message_id(body.decode("latin-1"))
    else:
        record.decode_record(bytearray(body), 0, check_crc=bool(mode & 2), decompress=bool(mode & 4))
