"""Verifying the lake against the hot tier before any local file may be deleted.

For a committed range, the lake's rows with CommitLog offsets in the range are read back
(the files are found through one snapshot's per-file offset statistics, so this still works
after optimize rewrote them; a file spanning many ranges is read once for all of them) and their count and digest are compared with the seal's,
which came from the segment's own bytes. Equal means every record is in the lake exactly
once with its body intact. Brokers share the table and their CommitLog offsets overlap, so
only rows of the seal's store hosts are counted (a seal from before they were recorded
counts every row in the range, as a lake of one broker needs).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.errors import VerificationError
from lakemq.tiering.damage import reading_table
from lakemq.tiering.digest import body_crc32c, combine, digest_of
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest, ManifestEntry
from lakemq.tiering.seal import load_seals
from lakemq.tiering.tables import MESSAGES_TABLE

__all__ = ["LakeCount", "LakeRange", "count_lake_range", "count_lake_ranges", "verify_manifest"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LakeCount:
    rows: int
    digest: int


@dataclass(frozen=True, slots=True)
class LakeRange:
    """CommitLog offsets [start, end), of ``store_hosts`` only when given (one broker's rows)."""

    start: int
    end: int
    store_hosts: Collection[str] | None = None


def _files_overlapping(lake: LakeLocation, ranges: Sequence[LakeRange]) -> list[tuple[str, list[int]]]:
    """Each data file of one snapshot that may hold rows of the ranges, with the indexes of
    those ranges: a compacted file spanning many ranges is then read once, not once a range."""
    from deltalake import DeltaTable

    uri = lake.table_uri(MESSAGES_TABLE)
    with reading_table(lake, MESSAGES_TABLE):
        actions = pa.table(DeltaTable(uri, storage_options=lake.delta_options()).get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    starts = np.array([r.start for r in ranges], dtype=np.float64)
    ends = np.array([r.end for r in ranges], dtype=np.float64)
    if "min.commitlog_offset" in actions.column_names:
        lo = actions.column("min.commitlog_offset").to_numpy(zero_copy_only=False).astype(np.float64)
        hi = actions.column("max.commitlog_offset").to_numpy(zero_copy_only=False).astype(np.float64)
        # Files without statistics (NaN) overlap every range: both comparisons are false.
        overlap = ~((lo[:, None] >= ends[None, :]) | (hi[:, None] < starts[None, :]))
    else:
        overlap = np.ones((len(paths), len(ranges)), dtype=bool)
    return [(f"{uri}/{urllib.parse.unquote(path)}", np.flatnonzero(row).tolist())
            for path, row in zip(paths, overlap) if row.any()]


def count_lake_ranges(lake: LakeLocation, ranges: Sequence[LakeRange],
                      progress: Callable[[int, int], None] | None = None) -> list[LakeCount]:
    """Rows and digest of the lake's ``messages`` rows in each range, from one snapshot,
    reading each data file once; ``progress`` is told the files read."""
    rows = [0] * len(ranges)
    digests = [0] * len(ranges)
    columns = ["commitlog_offset", "body"] + (["store_host"] if any(r.store_hosts is not None for r in ranges) else [])
    files = _files_overlapping(lake, ranges)
    for done, (uri, wanted) in enumerate(files, 1):
        with lake.fs.open(uri, "rb") as fh:
            table = pq.read_table(fh, columns=columns)
        offsets = table.column("commitlog_offset")
        for i in wanted:
            r = ranges[i]
            mask = pc.and_(pc.greater_equal(offsets, r.start), pc.less(offsets, r.end))
            if r.store_hosts is not None:
                mask = pc.and_(mask, pc.is_in(table.column("store_host"), pa.array(sorted(r.store_hosts), pa.string())))
            part = table.filter(mask)
            if part.num_rows:
                rows[i] += part.num_rows
                digests[i] = combine((digests[i], digest_of(part.column("commitlog_offset").to_numpy(),
                                                            body_crc32c(part.column("body").to_pylist()))))
        if progress:
            progress(done, len(files))
    return [LakeCount(n, d) for n, d in zip(rows, digests)]


def count_lake_range(lake: LakeLocation, start: int, end: int,
                     store_hosts: Collection[str] | None = None) -> LakeCount:
    """Rows and digest of the lake's ``messages`` rows with offsets in [start, end) and, when
    ``store_hosts`` is given, a store host among them (one broker's rows)."""
    return count_lake_ranges(lake, [LakeRange(start, end, store_hosts)])[0]


def verify_manifest(
    lake: LakeLocation, store_dir: str | Path, manifest: Manifest,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Manifest, Mapping[int, LakeCount]]:
    """Verify every unverified entry whose seal is still on local disk; raise
    VerificationError on the first mismatch. Returns the updated manifest (not saved)."""
    seals = {s.range_start: s for s in load_seals(store_dir)}
    todo: list[ManifestEntry] = [e for e in manifest.entries if not e.verified and e.range_start in seals]
    if not todo:
        return manifest, {}
    found = count_lake_ranges(
        lake, [LakeRange(e.range_start, e.range_end, seals[e.range_start].store_hosts) for e in todo], progress)
    counts: dict[int, LakeCount] = {}
    for entry, count in zip(todo, found):
        seal = seals[entry.range_start]
        counts[entry.range_start] = count
        expected = (seal.rows, seal.digest)
        if (count.rows, count.digest) != expected or (entry.rows, entry.digest) != expected:
            raise VerificationError(
                f"lake range [{entry.range_start}, {entry.range_end}) holds {count.rows} rows (digest "
                f"{count.digest}); segment {seal.file_name} has {seal.rows} (digest {seal.digest}), commit "
                f"info says {entry.rows} (digest {entry.digest})"
            )
        manifest = manifest.mark_verified(entry.range_start)
        log.info("verified [%d, %d): %d rows", entry.range_start, entry.range_end, count.rows)
    return manifest, counts
