"""The ``commitlog_dispatch`` PySpark data source: a live store's CommitLog as dispatch rows.

    spark.read.format("commitlog_dispatch").option("ranges", json).option("delay_levels", spec).load()

Where the ``commitlog`` source reads what tiering sealed, this one reads any store's files as
they are, including the newest one, for :mod:`lakemq.jobs.reindex`. The driver plans the
byte ranges (:func:`plan_ranges`: a walk over the 8-byte record heads, cut every ``stride``
bytes on a record start); every range is one partition, decoded by the vectorized decoder
(:func:`lakemq.jobs.decode.decode_records`, CRC checked) into one Arrow batch holding only
what the ConsumeQueue and IndexFile builders need: offset, size, topic, queue id and offset,
tags code (the delivery time for ``SCHEDULE_TOPIC_XXXX``, as the reput computes it), store
time, sys flag, KEYS, UNIQ_KEY. A record the decoder rejects comes back as a row with
``bad`` set, its offset and size, so the driver decides (stop, or skip and report).
"""

from __future__ import annotations

import itertools
import json
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from lakemq.common.message import MessageConst, tags_hash_code
from lakemq.jobs.decode import decode_records
from lakemq.store.delay_levels import SCHEDULE_TOPIC, DelayLevels
from lakemq.tiering.seal import commitlog_files
from lakemq.tiering.walk import walk_records

__all__ = ["DISPATCH_SCHEMA", "DispatchDataSource", "DispatchRange", "RangePlan", "decode_dispatch", "plan_ranges"]

DISPATCH_SCHEMA = pa.schema([
    ("commitlog_offset", pa.int64()),
    ("msg_size", pa.int32()),
    ("bad", pa.bool_()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("tags_code", pa.int64()),
    ("store_timestamp", pa.int64()),
    ("sys_flag", pa.int32()),
    ("keys", pa.string()),
    ("uniq_key", pa.string()),
])
_DDL = ("commitlog_offset long, msg_size int, bad boolean, topic string, queue_id int, queue_offset long, "
        "tags_code long, store_timestamp long, sys_flag int, keys string, uniq_key string")


@dataclass
class DispatchRange(InputPartition):
    path: str
    file_start: int
    start: int  # CommitLog offsets [start, end), both on record boundaries
    end: int


@dataclass
class RangePlan:
    ranges: list[DispatchRange] = field(default_factory=list)
    # CommitLog offset ranges holding no valid record, in order (the walk found them).
    corrupt: list[tuple[int, int]] = field(default_factory=list)
    data_end: int = 0  # end of the last good record: where the broker's recovery ends the log
    last_file_end: int = 0
    files: int = 0


def _cut(path: str, file_start: int, starts: np.ndarray, run_start: int, run_end: int,
         stride: int) -> list[DispatchRange]:
    """[run_start, run_end) (buffer positions) in pieces of about ``stride`` bytes, each
    starting on a record."""
    inside = starts[(starts >= run_start) & (starts < run_end)]
    if not len(inside):
        return []
    targets = np.arange(run_start, run_end, stride, dtype=np.int64)
    edges = np.unique(inside[np.minimum(np.searchsorted(inside, targets), len(inside) - 1)])
    bounds = [int(e) for e in edges] + [run_end]
    return [DispatchRange(path, file_start, file_start + a, file_start + b)
            for a, b in itertools.pairwise(bounds) if b > a]


def plan_ranges(store_dir: str | Path, *, stride: int, skip_corrupt: bool) -> RangePlan:
    """Byte ranges covering every good record of the store's CommitLog files. Without
    ``skip_corrupt`` planning ends at the first bad bytes (``corrupt`` holds where they
    start); with it, bad bytes are stepped over by resynchronising on the next verified
    record. Bytes after the newest file's last good record with no valid record after them
    are its unwritten (or torn) tail, not damage: the broker's recovery ends the log there."""
    plan = RangePlan()
    files = [f for f in commitlog_files(store_dir) if f.size > 0]
    plan.files = len(files)
    for i, f in enumerate(files):
        last = i == len(files) - 1
        plan.last_file_end = f.end
        with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            walk = walk_records(buf, f.start, 0, f.size, verify=False, on_bad="stop")
            starts, blank_at = walk.starts, walk.blank_at
            corrupt: list[tuple[int, int]] = []
            frontier = None
            if blank_at is None and walk.stop < f.size:
                rest = walk_records(buf, f.start, walk.stop, f.size, verify=True, on_bad="resync")
                corrupt = list(rest.corrupt)
                if last and rest.blank_at is None and corrupt and corrupt[-1][1] == f.size:
                    frontier = corrupt.pop()[0]  # the writer's frontier, not damage
                starts, blank_at = np.concatenate([starts, rest.starts]), rest.blank_at
        end = blank_at if blank_at is not None else (frontier if frontier is not None else f.size)
        if corrupt and not skip_corrupt:
            plan.corrupt.append((f.start + corrupt[0][0], f.start + corrupt[0][1]))
            plan.ranges += _cut(str(f.path), f.start, starts, 0, corrupt[0][0], stride)
            plan.data_end = f.start + corrupt[0][0]
            return plan
        plan.corrupt += [(f.start + a, f.start + b) for a, b in corrupt]
        run_start = 0
        for a, b in [*corrupt, (end, end)]:
            plan.ranges += _cut(str(f.path), f.start, starts, run_start, min(a, end), stride)
            run_start = b
        if len(starts):
            plan.data_end = f.start + end
    return plan


def _tags_codes(tags: pa.Array) -> np.ndarray:
    """Java hashCode of each TAGS value (0 when absent), computed once per distinct value."""
    encoded = pc.dictionary_encode(tags.fill_null(""))
    codes = np.array([tags_hash_code(t) for t in encoded.dictionary.to_pylist()], dtype=np.int64)
    return codes[encoded.indices.to_numpy(zero_copy_only=False)] if len(codes) else np.zeros(0, np.int64)


def decode_dispatch(buf: bytes, base_offset: int, delay_levels: DelayLevels | None) -> pa.RecordBatch:
    """Dispatch rows of the records in ``buf`` (whole records, the first at CommitLog offset
    ``base_offset``), records failing validation as ``bad`` rows."""
    walk = walk_records(buf, base_offset, 0, len(buf), verify=False, on_bad="raise")
    starts = walk.starts
    raw = np.frombuffer(buf, dtype=np.uint8)
    totals = (np.lib.stride_tricks.sliding_window_view(raw, 4)[starts].copy().view(">i4").reshape(-1)
              if len(starts) else np.zeros(0, ">i4")).astype(np.int32)
    decoded = decode_records(buf, base_offset, starts, check_crc=True)
    batch, bad_offsets = decoded.batch, decoded.bad_offsets
    good = ~np.isin(starts + base_offset, bad_offsets)
    topic = batch.column("topic")
    store_ts = batch.column("store_timestamp").to_numpy()
    tags_code = _tags_codes(batch.column("tags"))
    scheduled = np.flatnonzero(pc.equal(topic, SCHEDULE_TOPIC).to_numpy(zero_copy_only=False))
    if len(scheduled) and delay_levels is not None:
        levels = pc.map_lookup(batch.column("properties").take(pa.array(scheduled)),
                               pa.scalar(MessageConst.DELAY_TIME_LEVEL), "last").to_pylist()
        for row, level in zip(scheduled.tolist(), levels):
            # The reput's rule: a positive decimal DELAY makes the tags code the delivery time.
            if level and level.isdigit() and int(level) > 0:
                tags_code[row] = delay_levels.deliver_timestamp(int(level), int(store_ts[row]))
    n_bad = len(bad_offsets)
    columns = {
        "commitlog_offset": batch.column("commitlog_offset"),
        "msg_size": pa.array(totals[good]),
        "bad": pa.array(np.zeros(batch.num_rows, dtype=bool)),
        "topic": topic,
        "queue_id": batch.column("queue_id"),
        "queue_offset": batch.column("queue_offset"),
        "tags_code": pa.array(tags_code, pa.int64()),
        "store_timestamp": batch.column("store_timestamp"),
        "sys_flag": batch.column("sys_flag"),
        "keys": batch.column("keys"),
        "uniq_key": batch.column("uniq_key"),
    }
    good_rows = pa.RecordBatch.from_arrays([columns[f.name] for f in DISPATCH_SCHEMA], schema=DISPATCH_SCHEMA)
    if not n_bad:
        return good_rows
    bad_rows = pa.RecordBatch.from_arrays(
        [pa.array(bad_offsets.astype(np.int64)), pa.array(totals[~good]), pa.array(np.ones(n_bad, dtype=bool)),
         *(pa.nulls(n_bad, f.type) for f in list(DISPATCH_SCHEMA)[3:])],
        schema=DISPATCH_SCHEMA,
    )
    table = pa.Table.from_batches([good_rows, bad_rows]).sort_by("commitlog_offset")
    return table.combine_chunks().to_batches()[0]


def _read_range(part: DispatchRange) -> bytes:
    with open(part.path, "rb") as f:
        f.seek(part.start - part.file_start)
        return f.read(part.end - part.start)


class DispatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        if "ranges" not in options:
            raise ValueError("the commitlog_dispatch source needs option 'ranges' (JSON)")
        self.ranges = [DispatchRange(*r) for r in json.loads(options["ranges"])]
        spec = options.get("delay_levels", "")
        self.delay_levels = DelayLevels(spec) if spec else None

    def partitions(self) -> list[DispatchRange]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, DispatchRange)
        batch = decode_dispatch(_read_range(partition), partition.start, self.delay_levels)
        if batch.num_rows:
            yield batch


class DispatchDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "commitlog_dispatch"

    def schema(self) -> str:
        return _DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return DispatchReader(dict(self.options))
