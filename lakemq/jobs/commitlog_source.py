"""The ``commitlog`` PySpark data source's reader (the source itself is lakemq.jobs.sources):
sealed CommitLog segments as ``messages`` rows.

    register_sources(spark)  # lakemq.jobs.sources, once per session
    spark.read.format("commitlog").option("path", store_dir).load()

``path`` is a store root (a local directory or an fsspec URI such as ``s3://bucket/store``)
holding ``commitlog/`` and the seal files tiering wrote (``tiering/seals``). Each sealed
range is split at its boundary index into byte ranges that start on records; every range is
one Spark partition, read with one ranged GET and decoded to one Arrow batch.

Options: ``seals`` (comma-separated range starts to read; default all), ``skip_corrupt``
(leave bad records out and log their offsets instead of failing), ``check_crc`` (default
true), ``storage_options`` (JSON, object_store spelling as for the lake).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from lakemq.jobs.decode import decode_range
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import SealedSegment
from lakemq.tiering.tables import SPARK_ARROW_SCHEMA

__all__ = ["CommitLogReader", "SegmentRange", "read_seals"]

log = logging.getLogger(__name__)


@dataclass
class SegmentRange(InputPartition):
    file_uri: str
    file_start: int
    start: int  # CommitLog offsets [start, end)
    end: int


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    return str(options.get(name, str(default))).lower() == "true"


def read_seals(store: LakeLocation) -> list[SealedSegment]:
    """The seal files of a store, local or remote, oldest first."""
    files = [f for f in store.list_files(store.join("tiering", "seals")) if f.endswith(".json")]
    return sorted((SealedSegment.from_json(store.read_bytes(f).decode()) for f in files),
                  key=lambda s: s.range_start)


class CommitLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        if "path" not in options:
            raise ValueError("the commitlog source needs option 'path' (the store directory)")
        self.store = LakeLocation.of(options["path"], json.loads(options.get("storage_options") or "{}"))
        wanted = options.get("seals", "")
        self.seals = {int(s) for s in wanted.split(",") if s.strip()} if wanted else None
        self.skip_corrupt = _flag(options, "skip_corrupt", False)
        self.check_crc = _flag(options, "check_crc", True)

    def partitions(self) -> list[SegmentRange]:
        ranges = []
        for seal in read_seals(self.store):
            if self.seals is not None and seal.range_start not in self.seals:
                continue
            uri = self.store.join("commitlog", seal.file_name)
            ranges += [SegmentRange(uri, seal.file_start, a, b) for a, b in seal.byte_ranges()]
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentRange)
        data = self.store.read_range(partition.file_uri, partition.start - partition.file_start,
                                     partition.end - partition.file_start)
        batch, skipped = decode_range(data, partition.start, skip_corrupt=self.skip_corrupt, check_crc=self.check_crc)
        for a, b in skipped:
            log.warning("skipped corrupt CommitLog bytes [%d, %d) of %s", a, b, partition.file_uri)
        if batch.num_rows:
            yield batch.cast(SPARK_ARROW_SCHEMA)

