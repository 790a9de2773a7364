"""The ``lakedelta`` PySpark data source: a Delta table snapshot read without Delta's jars.

    spark.read.format("lakedelta").option("path", table_uri).option("versionAsOf", 3).load()

The snapshot's add actions come from ``deltalake`` (file paths, partition values, per-file
statistics); the Parquet files are read with pyarrow over fsspec, one Spark partition per
group of files, and partition columns are put back as constants. Whole-table Arrow reads
through deltalake are avoided on purpose (a pyarrow/deltalake crash at interpreter exit has
been seen after them).

Spark hands over the query's simple filters: ``=``/``IN`` on partition columns and
comparisons on columns with statistics prune files; Spark still applies every filter.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["DeltaDataSource", "DeltaReader", "FileGroup", "snapshot_files"]

_GROUP_BYTES = 64 << 20

# The filters a file's partition values or min/max statistics can rule out; the reader keeps these.
_Pruning: TypeAlias = EqualTo | In | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual


@dataclass
class FileGroup(InputPartition):
    files: list[tuple[str, dict[str, Any]]]  # (absolute URI, partition values)


def _value(v: Any) -> Any:
    return v.isoformat() if isinstance(v, datetime.date) else v


def snapshot_files(table: Any, table_uri: str) -> list[dict[str, Any]]:
    """The snapshot's add actions: ``uri``, ``size``, ``rows``, ``partition`` (name -> value),
    ``min``/``max`` (column -> value, where statistics exist)."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out = []
    for a in actions:
        rel = urllib.parse.unquote(a["path"])
        uri = rel if "://" in rel or rel.startswith("/") else f"{table_uri.rstrip('/')}/{rel}"
        out.append({
            "uri": uri, "size": a["size_bytes"], "rows": a.get("num_records"),
            "partition": {k[10:]: v for k, v in a.items() if k.startswith("partition.")},
            "min": {k[4:]: v for k, v in a.items() if k.startswith("min.")},
            "max": {k[4:]: v for k, v in a.items() if k.startswith("max.")},
        })
    return out


def _keeps(f: dict[str, Any], flt: _Pruning) -> bool:
    """False only when the file certainly holds no row passing ``flt``."""
    col = flt.attribute[0] if len(flt.attribute) == 1 else None
    if col is None:
        return True
    if col in f["partition"]:
        v = _value(f["partition"][col])
        lo = hi = v
    elif col in f["min"] and f["min"][col] is not None and f["max"].get(col) is not None:
        lo, hi = _value(f["min"][col]), _value(f["max"][col])
    else:
        return True
    try:
        if isinstance(flt, EqualTo):
            return bool(lo <= _value(flt.value) <= hi)
        if isinstance(flt, In):
            return any(lo <= _value(x) <= hi for x in flt.value)
        if isinstance(flt, GreaterThan):
            return bool(hi > _value(flt.value))
        if isinstance(flt, GreaterThanOrEqual):
            return bool(hi >= _value(flt.value))
        if isinstance(flt, LessThan):
            return bool(lo < _value(flt.value))
        if isinstance(flt, LessThanOrEqual):
            return bool(lo <= _value(flt.value))
    except TypeError:
        return True
    return True


class DeltaReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType, arrow_schema: pa.Schema) -> None:
        self.path = options["path"]
        self.storage_options = json.loads(options.get("storage_options") or "{}")
        self.version = _version(options)
        self.arrow_schema = arrow_schema
        self.filters: list[_Pruning] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for flt in filters:
            if isinstance(flt, (EqualTo, In, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                self.filters.append(flt)
            yield flt  # pruning is per file: Spark still filters the rows

    def partitions(self) -> Sequence[FileGroup]:
        table = _open(self.path, self.storage_options, self.version)
        files = [f for f in snapshot_files(table, self.path) if all(_keeps(f, flt) for flt in self.filters)]
        groups: list[FileGroup] = []
        current: list[tuple[str, dict[str, Any]]] = []
        size = 0
        for f in files:
            current.append((f["uri"], {k: _value(v) for k, v in f["partition"].items()}))
            size += f["size"]
            if size >= _GROUP_BYTES:
                groups.append(FileGroup(current))
                current, size = [], 0
        if current:
            groups.append(FileGroup(current))
        return groups or [FileGroup([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileGroup)
        lake = LakeLocation.of(self.path, self.storage_options)
        for uri, values in partition.files:
            with lake.fs.open(uri, "rb") as fh:
                data = pq.read_table(fh)
            n = data.num_rows
            columns = []
            for field in self.arrow_schema:
                if field.name in values:
                    raw = values[field.name]
                    if pa.types.is_date32(field.type) and isinstance(raw, str):
                        raw = datetime.date.fromisoformat(raw)
                    columns.append(pa.array([raw] * n, field.type))
                else:
                    columns.append(data.column(field.name).cast(field.type))
            yield from pa.Table.from_arrays(columns, schema=self.arrow_schema).to_batches()


def _version(options: dict[str, str]) -> int | None:
    """The ``versionAsOf`` option; Spark hands option names to Python sources lower-cased."""
    lowered = {k.lower(): v for k, v in options.items()}
    version = lowered.get("versionasof") or lowered.get("version")
    return int(version) if version not in (None, "") else None


def _open(path: str, storage_options: dict[str, str], version: int | None) -> Any:
    from deltalake import DeltaTable

    lake = LakeLocation.of(path, storage_options)
    return DeltaTable(lake.uri, version=version, storage_options=lake.delta_options())


def _arrow_schema(table: Any) -> pa.Schema:
    schema = pa.schema(table.schema().to_arrow())
    # Spark's Arrow types: deltalake reports views/large types for strings and binaries.
    fixed = []
    for f in schema:
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        elif pa.types.is_map(t):
            t = pa.map_(pa.string(), pa.string())
        fixed.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fixed)


class DeltaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "lakedelta"

    def _schemas(self) -> tuple[StructType, pa.Schema]:
        options = dict(self.options)
        if "path" not in options:
            raise ValueError("the lakedelta source needs option 'path' (the Delta table URI)")
        table = _open(options["path"], json.loads(options.get("storage_options") or "{}"), _version(options))
        arrow = _arrow_schema(table)
        return from_arrow_schema(arrow), arrow

    def schema(self) -> StructType:
        return self._schemas()[0]

    def reader(self, schema: StructType) -> DeltaReader:
        return DeltaReader(dict(self.options), schema, self._schemas()[1])
