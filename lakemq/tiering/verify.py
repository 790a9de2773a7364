"""Verifying the lake against the hot tier before any local file may be deleted.

For a committed range, the lake's rows with CommitLog offsets in the range are read back
(the files are found through the snapshot's per-file offset statistics, so this still works
after optimize rewrote them) and their count and digest are compared with the seal's,
which came from the segment's own bytes. Equal means every record is in the lake exactly
once with its body intact. Brokers share the table and their CommitLog offsets overlap, so
only rows of the seal's store hosts are counted (a seal from before they were recorded
counts every row in the range, as a lake of one broker needs).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakemq.errors import VerificationError
from lakemq.tiering.damage import reading_table
from lakemq.tiering.digest import body_crc32c, digest_of
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest, ManifestEntry
from lakemq.tiering.seal import load_seals
from lakemq.tiering.tables import MESSAGES_TABLE

__all__ = ["LakeCount", "count_lake_range", "verify_manifest"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LakeCount:
    rows: int
    digest: int


def _files_overlapping(lake: LakeLocation, start: int, end: int) -> list[str]:
    from deltalake import DeltaTable

    uri = lake.table_uri(MESSAGES_TABLE)
    with reading_table(lake, MESSAGES_TABLE):
        actions = pa.table(DeltaTable(uri, storage_options=lake.delta_options()).get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    if "min.commitlog_offset" in actions.column_names:
        lo = actions.column("min.commitlog_offset").to_numpy(zero_copy_only=False)
        hi = actions.column("max.commitlog_offset").to_numpy(zero_copy_only=False)
        # Files without statistics (NaN after the numpy conversion) are always read.
        keep = ~((lo >= end) | (hi < start))
        paths = [p for p, k in zip(paths, keep) if k]
    return [f"{uri}/{urllib.parse.unquote(p)}" for p in paths]


def count_lake_range(lake: LakeLocation, start: int, end: int,
                     store_hosts: Collection[str] | None = None) -> LakeCount:
    """Rows and digest of the lake's ``messages`` rows with offsets in [start, end) and, when
    ``store_hosts`` is given, a store host among them (one broker's rows)."""
    rows = 0
    digests = []
    columns = ["commitlog_offset", "body"] + ([] if store_hosts is None else ["store_host"])
    for uri in _files_overlapping(lake, start, end):
        with lake.fs.open(uri, "rb") as fh:
            table = pq.read_table(fh, columns=columns)
        offsets = table.column("commitlog_offset")
        mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
        if store_hosts is not None:
            mask = pc.and_(mask, pc.is_in(table.column("store_host"), pa.array(sorted(store_hosts), pa.string())))
        part = table.filter(mask)
        if part.num_rows:
            rows += part.num_rows
            digests.append(digest_of(part.column("commitlog_offset").to_numpy(),
                                     body_crc32c(part.column("body").to_pylist())))
    return LakeCount(rows, int(np.uint64(sum(digests) % (1 << 64))))


def verify_manifest(
    lake: LakeLocation, store_dir: str | Path, manifest: Manifest,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Manifest, Mapping[int, LakeCount]]:
    """Verify every unverified entry whose seal is still on local disk; raise
    VerificationError on the first mismatch. Returns the updated manifest (not saved)."""
    seals = {s.range_start: s for s in load_seals(store_dir)}
    todo: list[ManifestEntry] = [e for e in manifest.entries if not e.verified and e.range_start in seals]
    counts: dict[int, LakeCount] = {}
    for i, entry in enumerate(todo):
        seal = seals[entry.range_start]
        found = count_lake_range(lake, entry.range_start, entry.range_end, seal.store_hosts)
        counts[entry.range_start] = found
        expected = (seal.rows, seal.digest)
        if (found.rows, found.digest) != expected or (entry.rows, entry.digest) != expected:
            raise VerificationError(
                f"lake range [{entry.range_start}, {entry.range_end}) holds {found.rows} rows (digest "
                f"{found.digest}); segment {seal.file_name} has {seal.rows} (digest {seal.digest}), commit "
                f"info says {entry.rows} (digest {entry.digest})"
            )
        manifest = manifest.mark_verified(entry.range_start)
        log.info("verified [%d, %d): %d rows", entry.range_start, entry.range_end, found.rows)
        if progress:
            progress(i + 1, len(todo))
    return manifest, counts
