"""Vectorized CommitLog decoding: raw bytes -> one Arrow record batch of ``messages`` rows.

The only per-record Python step is walking the sizes to find where records start
(:mod:`lakemq.tiering.walk`). Then, with numpy over the raw bytes:

- fixed-width header fields are gathered as a (records x 88) byte matrix viewed through a
  big-endian structured dtype (rows picked from a sliding-window view, no struct calls);
- variable fields (body, topic, properties) become Arrow binary arrays: a +1/-1 marker
  array and a cumulative sum mark their bytes, one boolean compress copies them out, and
  the lengths' cumulative sum is the offsets buffer;
- properties (``name\\x01value\\x02`` ...) are split by locating every 0x02 and 0x01 in the
  concatenated property bytes, giving Arrow map<string,string> offsets, keys and values;
  TAGS, KEYS and UNIQ_KEY are taken out of the map the same way;
- message ids are the hex of (store host, offset) through a 256-entry lookup table; host
  strings are formatted once per distinct host.

Records that fail validation (magic, lengths that do not add up, PHYSICALOFFSET not their
own offset, body CRC) are returned as offsets; the caller raises or skips them.
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakemq.common.message import MessageConst
from lakemq.common.record import BODY_POS, MESSAGE_MAGIC_CODE, RECORD_FIXED_SIZE
from lakemq.errors import CorruptSegmentError
from lakemq.tiering.tables import KIND_NORMAL, MESSAGES_SCHEMA, SYSTEM_TOPIC_KINDS
from lakemq.tiering.walk import Walk, walk_records

__all__ = ["HEADER_DTYPE", "Decoded", "decode_records", "decode_range"]

HEADER_DTYPE = np.dtype({
    "names": ["total", "magic", "crc", "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag",
              "born_ts", "born_host", "store_ts", "store_host", "reconsume", "prepared", "body_len"],
    "formats": [">i4", ">u4", ">i4", ">i4", ">i4", ">i8", ">i8", ">i4", ">i8", ">u8", ">i8", ">u8", ">i4",
                ">i8", ">i4"],
    "offsets": [0, 4, 8, 12, 16, 20, 28, 36, 40, 48, 56, 64, 72, 76, 84],
    "itemsize": BODY_POS,
})
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Decoded:
    batch: pa.RecordBatch
    bad_offsets: np.ndarray  # CommitLog offsets of records that failed validation (left out)


def _gather(raw: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """``raw[p : p + width]`` for every p, as a (len(positions), width) matrix: row picks from a
    sliding-window view, so each row is one contiguous copy."""
    if len(raw) < width:
        return np.empty((0, width), dtype=np.uint8)
    return np.lib.stride_tricks.sliding_window_view(raw, width)[positions]


def _slices(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``raw[s : s + n]`` for each (s, n) (non-overlapping, in order): (offsets, bytes)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    marks = np.zeros(len(raw) + 1, dtype=np.int8)
    nonempty = lengths > 0
    marks[starts[nonempty]] += 1
    marks[starts[nonempty] + lengths[nonempty]] -= 1
    mask = np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)
    return offsets, raw[mask]


def _binary(offsets: np.ndarray, data: np.ndarray, type_: pa.DataType = pa.binary()) -> pa.Array:
    n = len(offsets) - 1
    arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
    return arr if type_ == pa.binary() else arr.cast(type_)


def _hosts(packed: np.ndarray) -> pa.Array:
    """(ip << 32 | port) values -> "a.b.c.d:port" strings, formatted once per distinct host."""
    uniq, inverse = np.unique(packed, return_inverse=True)
    names = [f"{socket.inet_ntoa(struct.pack('>I', int(u) >> 32))}:{int(u) & 0xFFFFFFFF}" for u in uniq]
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
    key_off, key_bytes = _slices(data, item_start, sep_pos - item_start)
    val_off, val_bytes = _slices(data, sep_pos + 1, item_end - sep_pos - 1)
    keys = _binary(key_off, key_bytes, pa.string())
    values = _binary(val_off, val_bytes, pa.string())
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


def decode_records(buf: bytes | memoryview, base_offset: int, starts: np.ndarray, *, check_crc: bool) -> Decoded:
    """Decode the records at ``starts`` (buffer positions) of ``buf``, whose first byte is
    at CommitLog offset ``base_offset``."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    hdr = _gather(raw, starts, BODY_POS).view(HEADER_DTYPE).reshape(-1)
    total = hdr["total"].astype(np.int64)
    body_len = hdr["body_len"].astype(np.int64)
    record_end = starts + total
    ok = (hdr["magic"] == MESSAGE_MAGIC_CODE) & (total >= RECORD_FIXED_SIZE) & (record_end <= len(raw))
    ok &= (body_len >= 0) & (starts + BODY_POS + body_len + 3 <= record_end)
    topic_len_pos = np.where(ok, starts + BODY_POS + body_len, 0)
    topic_len = raw[topic_len_pos].astype(np.int64)
    props_len_pos = np.where(ok, topic_len_pos + 1 + topic_len, 0)
    ok &= props_len_pos + 2 <= record_end
    props_len_pos = np.where(ok, props_len_pos, 0)
    props_len = (raw[props_len_pos].astype(np.int64) << 8) | raw[props_len_pos + 1]
    ok &= (props_len < 0x8000) & (total == RECORD_FIXED_SIZE + body_len + topic_len + props_len)
    ok &= hdr["physical_offset"] == starts + base_offset
    if check_crc:
        view = memoryview(buf)
        crcs = np.fromiter(
            (zlib.crc32(view[s + BODY_POS : s + BODY_POS + b]) & 0x7FFFFFFF if good else -1
             for s, b, good in zip(starts.tolist(), body_len.tolist(), ok.tolist())),
            dtype=np.int64, count=len(starts),
        )
        ok &= crcs == hdr["crc"]
    bad = starts[~ok] + base_offset
    if not ok.all():
        keep = np.flatnonzero(ok)
        starts, hdr, body_len, topic_len_pos, topic_len, props_len_pos, props_len = (
            a[keep] for a in (starts, hdr, body_len, topic_len_pos, topic_len, props_len_pos, props_len))
    body = _binary(*_slices(raw, starts + BODY_POS, body_len))
    topic = _binary(*_slices(raw, topic_len_pos + 1, topic_len), pa.string())
    props, picked = _properties(*_slices(raw, props_len_pos + 2, props_len))
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


def decode_range(
    buf: bytes, base_offset: int, *, skip_corrupt: bool, check_crc: bool = True
) -> tuple[pa.RecordBatch, tuple[tuple[int, int], ...]]:
    """Decode every record in ``buf`` (a byte range starting on a record at CommitLog offset
    ``base_offset``). A bad record raises CorruptSegmentError with its offset; with
    ``skip_corrupt`` bad byte ranges are left out and returned as CommitLog offset ranges."""
    if skip_corrupt:
        walk: Walk = walk_records(buf, base_offset, 0, len(buf), verify=True, on_bad="resync")
    else:
        walk = walk_records(buf, base_offset, 0, len(buf), verify=False, on_bad="raise")
    decoded = decode_records(buf, base_offset, walk.starts, check_crc=check_crc and not skip_corrupt)
    if len(decoded.bad_offsets):
        first = int(decoded.bad_offsets[0])
        raise CorruptSegmentError(f"corrupt CommitLog record at offset {first}", first)
    skipped = tuple((a + base_offset, b + base_offset) for a, b in walk.corrupt)
    return decoded.batch, skipped
