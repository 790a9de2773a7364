"""Vectorized CommitLog decoding: raw bytes -> one Arrow record batch of ``messages`` rows.

No per-record Python: record starts come from :func:`lakemq.tiering.walk.walk_records`
(numpy over a clean range), and lengths are checked by :func:`lakemq.tiering.walk.record_layout`.
Then, with numpy over the raw bytes:

- fixed-width header fields are gathered as a (records x 88) byte matrix viewed through a
  big-endian structured dtype (rows picked from a sliding-window view, no struct calls);
- variable fields (body, topic, properties) become Arrow binary-view arrays pointing into the
  raw buffer (16 bytes per record, built with numpy), which Arrow's cast copies into plain
  binary arrays with one memcpy per value;
- properties (``name\\x01value\\x02`` ...) are split by locating every 0x02 and 0x01 in the
  concatenated property bytes, giving Arrow map<string,string> offsets, keys and values;
  TAGS, KEYS and UNIQ_KEY are taken out of the map the same way;
- message ids are the hex of (store host, offset) through a 256-entry lookup table; host
  strings are formatted once per distinct host.

Records that fail validation (magic, lengths that do not add up, PHYSICALOFFSET not their
own offset, body CRC when asked) are returned as offsets; the caller raises or skips them.
The body CRC is a per-record C call; compaction leaves it to sealing, which checked every CRC
and keeps a digest of the bodies that the written rows must match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakemq.common.message import MessageConst
from lakemq.common.record import BODY_POS, packed_host
from lakemq.errors import CorruptSegmentError, FrameError
from lakemq.tiering.tables import KIND_NORMAL, MESSAGES_SCHEMA, SYSTEM_TOPIC_KINDS
from lakemq.tiering.walk import HEADER_DTYPE, Walk, chained_records, gather, record_layout, walk_records

__all__ = ["HEADER_DTYPE", "Decoded", "binary_slices", "decode_pulled_body", "decode_range", "decode_records", "offsets_data", "partition_order"]

_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)
_DAY_MS = 86_400_000
_BINARY = pa.binary()


@dataclass(frozen=True, slots=True)
class Decoded:
    batch: pa.RecordBatch
    bad_offsets: np.ndarray  # CommitLog offsets of records that failed validation (left out)


def binary_slices(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  type_: pa.DataType = _BINARY) -> pa.Array:
    """``raw[s : s + n]`` for each (s, n) as a binary (or string) array: binary views into ``raw``
    (a length and the first 12 bytes inline; longer values also point at their bytes), then
    Arrow's cast to the plain layout."""
    n = len(starts)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    views = np.zeros((n, 4), dtype="<i4")
    views[:, 0] = lengths
    if n:
        limit = max(len(raw) - 12, 0)
        prefix = gather(raw, np.minimum(starts, limit), 12) if len(raw) >= 12 else np.zeros((n, 12), np.uint8)
        # Values within 12 bytes of the end are read through a zero-padded tail.
        near = starts > limit if len(raw) >= 12 else np.ones(n, np.bool_)
        if near.any():
            tail = np.concatenate([raw[limit:], np.zeros(12, np.uint8)])
            prefix[near] = gather(tail, starts[near] - limit, 12)
        inline = prefix * (np.arange(12) < np.minimum(lengths, 12)[:, None])
        views.view(np.uint8).reshape(n, 16)[:, 4:] = inline
        long = lengths > 12
        views[long, 2] = 0
        views[long, 3] = starts[long]
    arr = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(raw)])
    return arr.cast(type_)


def offsets_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary array's (offsets, bytes) as numpy, offsets rebased to 0."""
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and len(data_buf) else np.empty(0, np.uint8)
    return offsets - offsets[0], data[offsets[0] : offsets[-1]]


def _hosts(packed: np.ndarray) -> pa.Array:
    """(ip << 32 | port) values -> "a.b.c.d:port" strings, formatted once per distinct host."""
    uniq, inverse = np.unique(packed, return_inverse=True)
    names = [packed_host(int(u)) for u in uniq]
    return pa.array(names, pa.string()).take(pa.array(inverse.astype(np.int32)))


def _msg_ids(store_host: np.ndarray, physical: np.ndarray) -> pa.Array:
    n = len(physical)
    raw = np.concatenate(
        [store_host.astype(">u8").view(np.uint8).reshape(n, 8), physical.astype(">i8").view(np.uint8).reshape(n, 8)],
        axis=1,
    )
    text = _HEX[raw].reshape(-1)
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _properties(offsets: np.ndarray, data: np.ndarray) -> tuple[pa.MapArray, dict[str, pa.Array]]:
    """Parse RocketMQ property strings into a map array, plus TAGS/KEYS/UNIQ_KEY columns."""
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    ends = offsets[1:]
    # RocketMQ terminates every pair with 0x02; give the rare unterminated tail one too.
    open_tail = (lengths > 0) & (data[np.maximum(ends - 1, 0)] != 2) if len(data) else np.zeros(n, bool)
    if open_tail.any():
        data = np.insert(data, ends[open_tail], np.uint8(2))
        offsets = offsets + np.concatenate([[0], np.cumsum(open_tail)])
    term = np.flatnonzero(data == 2)
    item_start = np.concatenate([[0], term[:-1] + 1]).astype(np.int64) if len(term) else term.astype(np.int64)
    seps = np.flatnonzero(data == 1)
    first_sep = np.searchsorted(seps, item_start)
    sep_pos = seps[np.minimum(first_sep, max(len(seps) - 1, 0))] if len(seps) else np.full(len(term), -1)
    has_pair = (first_sep < len(seps)) & (sep_pos < term) if len(seps) else np.zeros(len(term), bool)
    item_record = np.searchsorted(offsets, item_start, side="right") - 1
    item_start, item_end, sep_pos, item_record = (item_start[has_pair], term[has_pair], sep_pos[has_pair],
                                                  item_record[has_pair])
    keys = binary_slices(data, item_start, sep_pos - item_start, pa.string())
    values = binary_slices(data, sep_pos + 1, item_end - sep_pos - 1, pa.string())
    map_offsets = np.searchsorted(item_record, np.arange(n + 1), side="left").astype(np.int32)
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values)
    picked: dict[str, pa.Array] = {}
    for name in (MessageConst.TAGS, MessageConst.KEYS, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
        hit = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
        index = np.full(n, -1, dtype=np.int64)
        index[item_record[hit]] = hit  # a repeated name: the last one wins, as in RocketMQ
        picked[name] = values.take(pa.array(index, mask=index < 0))
    return props, picked


def _kinds(topics: pa.Array) -> pa.Array:
    encoded = pc.dictionary_encode(topics)
    names = [SYSTEM_TOPIC_KINDS.get(t, KIND_NORMAL) for t in encoded.dictionary.to_pylist()]
    return pa.array(names, pa.string()).take(encoded.indices)


def decode_records(buf: bytes | memoryview, base_offset: int, starts: np.ndarray, *, check_crc: bool,
                   own_offsets: bool = True) -> Decoded:
    """Decode the records at ``starts`` (buffer positions) of ``buf``, whose first byte is
    at CommitLog offset ``base_offset``; without ``own_offsets``, records gathered from
    anywhere in the CommitLog (a pull's body), each carrying its offset."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    layout = record_layout(raw, starts, base_offset, check_crc=check_crc, own_offsets=own_offsets)
    ok, hdr, body_len = layout.ok, layout.header, layout.body_len
    topic_len_pos, topic_len, props_len_pos, props_len = (layout.topic_len_pos, layout.topic_len,
                                                          layout.props_len_pos, layout.props_len)
    bad = starts[~ok] + base_offset
    if not ok.all():
        keep = np.flatnonzero(ok)
        starts, hdr, body_len, topic_len_pos, topic_len, props_len_pos, props_len = (
            a[keep] for a in (starts, hdr, body_len, topic_len_pos, topic_len, props_len_pos, props_len))
    body = binary_slices(raw, starts + BODY_POS, body_len)
    topic = binary_slices(raw, topic_len_pos + 1, topic_len, pa.string())
    props, picked = _properties(*offsets_data(binary_slices(raw, props_len_pos + 2, props_len)))
    store_ts = hdr["store_ts"].astype(np.int64)
    columns = {
        "topic": topic,
        "kind": _kinds(topic),
        "queue_id": pa.array(hdr["queue_id"].astype(np.int32)),
        "queue_offset": pa.array(hdr["queue_offset"].astype(np.int64)),
        "commitlog_offset": pa.array(hdr["physical_offset"].astype(np.int64)),
        "msg_id": _msg_ids(hdr["store_host"], hdr["physical_offset"]),
        "uniq_key": picked[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX],
        "tags": picked[MessageConst.TAGS],
        "keys": picked[MessageConst.KEYS],
        "properties": props,
        "body": body,
        "flag": pa.array(hdr["flag"].astype(np.int32)),
        "sys_flag": pa.array(hdr["sys_flag"].astype(np.int32)),
        "born_timestamp": pa.array(hdr["born_ts"].astype(np.int64)),
        "born_host": _hosts(hdr["born_host"].astype(np.uint64)),
        "store_timestamp": pa.array(store_ts),
        "store_host": _hosts(hdr["store_host"].astype(np.uint64)),
        "reconsume_times": pa.array(hdr["reconsume"].astype(np.int32)),
        "prepared_transaction_offset": pa.array(hdr["prepared"].astype(np.int64)),
        "body_crc": pa.array(hdr["crc"].astype(np.int32)),
        "store_date": pa.array((store_ts // _DAY_MS).astype(np.int32), pa.int32()).cast(pa.date32()),
    }
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in MESSAGES_SCHEMA], schema=MESSAGES_SCHEMA)
    return Decoded(batch, bad)


def decode_pulled_body(body: bytes) -> pa.RecordBatch:
    """The records of a pull's answer (the broker's stored bytes, one record after another) as
    ``messages`` rows, the same rows the lake holds for them. A record that does not check out
    raises FrameError: a pull answer is not a file to skip damage in."""
    try:
        starts = chained_records(body)
    except CorruptSegmentError as exc:
        raise FrameError(f"undecodable pull answer: a record at byte {exc.offset} does not check out") from exc
    try:
        decoded = decode_records(body, 0, starts, check_crc=True, own_offsets=False)
    except pa.ArrowInvalid as exc:  # text fields no CRC covers: topic, properties
        raise FrameError(f"undecodable pull answer: {exc}") from exc
    if len(decoded.bad_offsets):
        raise FrameError(f"undecodable pull answer: the record at byte {int(decoded.bad_offsets[0])} does not check out")
    return decoded.batch


def partition_order(raw: np.ndarray, starts: np.ndarray, base_offset: int) -> np.ndarray:
    """An order of ``starts`` that puts the records of each partition (topic, store day)
    together, CommitLog order kept within each: decoding in this order spares the writer a
    reordering copy of every column. The identity when the records are in such an order
    already, or when one does not check out (decoding reports it)."""
    same = np.arange(len(starts))
    if len(starts) < 2:
        return same
    layout = record_layout(raw, starts, base_offset, check_crc=False)
    if not layout.ok.all():
        return same
    topics = pc.dictionary_encode(binary_slices(raw, layout.topic_len_pos + 1, layout.topic_len))
    days = layout.header["store_ts"].astype(np.int64) // _DAY_MS
    key = topics.indices.to_numpy().astype(np.int64) * (int(days.max() - days.min()) + 1) + (days - days.min())
    return same if (np.diff(key) >= 0).all() else np.argsort(key, kind="stable")


def decode_range(
    buf: bytes, base_offset: int, *, skip_corrupt: bool, check_crc: bool = True, grouped: bool = False
) -> tuple[pa.RecordBatch, tuple[tuple[int, int], ...]]:
    """Decode every record in ``buf`` (a byte range starting on a record at CommitLog offset
    ``base_offset``). A bad record raises CorruptSegmentError with its offset; with
    ``skip_corrupt`` bad byte ranges are left out and returned as CommitLog offset ranges.
    ``grouped`` returns the rows of each partition together (:func:`partition_order`)."""
    if skip_corrupt:
        walk: Walk = walk_records(buf, base_offset, 0, len(buf), verify=True, on_bad="resync")
    else:
        walk = walk_records(buf, base_offset, 0, len(buf), verify=False, on_bad="raise")
    starts = walk.starts
    if grouped:
        starts = starts[partition_order(np.frombuffer(buf, dtype=np.uint8), starts, base_offset)]
    decoded = decode_records(buf, base_offset, starts, check_crc=check_crc and not skip_corrupt)
    if len(decoded.bad_offsets):
        first = int(decoded.bad_offsets.min())
        raise CorruptSegmentError(f"corrupt CommitLog record at offset {first}", first)
    skipped = tuple((a + base_offset, b + base_offset) for a, b in walk.corrupt)
    return decoded.batch, skipped
