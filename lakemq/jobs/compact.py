"""compact: sealed CommitLog segments -> the Delta tables ``messages`` and ``message_keys``,
exactly once.

Per run:
1. seal what became final (:mod:`lakemq.tiering.seal`; with ``flushed``, also every whole
   record the broker has flushed, so a range may end inside a CommitLog file);
2. bring the manifest up to date with the Delta log and read the broker's app transaction
   version: every sealed range ending above it is pending; create ``message_keys`` (filled
   for what ``messages`` held before it, :mod:`lakemq.jobs.key_index`) if missing;
3. one Spark job writes the pending ranges: each task reads byte ranges of one segment from
   the store, decodes them and writes Parquet files into the tables' locations, returning
   only the files' descriptions (:mod:`lakemq.jobs.lake_writer`);
4. the driver commits each range, oldest first: its key files in one ``message_keys``
   commit, then its message files in ONE ``messages`` commit, each with the app transaction
   (broker name, range end), the latter with the range, row count and digest in the commit
   info; the rows and digest must equal what sealing computed from the segment's bytes, or
   nothing is committed;
5. the manifest records the commits.

A re-run finds nothing pending. A run that dies after writing files but before a commit
leaves unreferenced files (vacuum removes them) and the range still pending, so the next
run writes and commits it once. A concurrent run that commits the same range first makes
this run's commit a no-op, decided by the app transaction version.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakemq.common.faults import crash_point
from lakemq.errors import CorruptSegmentError, LakeError, VerificationError
from lakemq.jobs.key_index import commit_key_files, ensure_key_index
from lakemq.jobs.lake_writer import FILE_INFO_DDL, SegmentWriter, plan_tasks
from lakemq.tiering.delta_log import make_log_durable, repair_torn_log
from lakemq.tiering.digest import combine
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest, ManifestEntry, commit_metadata
from lakemq.tiering.seal import SealedSegment, load_seals, seal_segments
from lakemq.tiering.table_handles import TableHandles
from lakemq.tiering.tables import KEYS_TABLE, MESSAGES_SCHEMA, MESSAGES_TABLE, PARTITION_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CompactResult", "compact", "ensure_table", "pending_segments", "write_segment_files"]

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (step, done, total)


@dataclass(frozen=True, slots=True)
class CompactResult:
    committed: tuple[ManifestEntry, ...]  # ranges this run committed
    already_committed: tuple[int, ...]  # range starts another run committed meanwhile
    sealed: int  # new seals this run
    rows: int
    bytes_in: int  # CommitLog bytes of the committed ranges
    skipped_corrupt: tuple[tuple[int, int], ...]
    seconds: float


def ensure_table(lake: LakeLocation, *, checkpoint_interval: int = 10) -> Any:
    from deltalake import DeltaTable, Schema

    table = DeltaTable.create(
        lake.table_uri(MESSAGES_TABLE), Schema.from_arrow(MESSAGES_SCHEMA), mode="ignore",
        partition_by=list(PARTITION_COLUMNS), name=MESSAGES_TABLE,
        description="RocketMQ CommitLog records tiered by lakemq",
        configuration={"delta.checkpointInterval": str(checkpoint_interval)},
        storage_options=lake.delta_options(),
    )
    make_log_durable(lake, MESSAGES_TABLE)
    return table


def pending_segments(store_dir: str | Path, committed_end: int) -> list[SealedSegment]:
    return [s for s in load_seals(store_dir) if s.range_end > committed_end]


def write_segment_files(
    spark: SparkSession, *, store_dir: str | Path, lake: LakeLocation, segments: Sequence[SealedSegment],
    skip_corrupt: bool = False, run_id: str | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """Step 3: Spark tasks read the segments and write their Parquet files; returns the file
    descriptions by segment range start. Commits nothing."""
    readable = [s for s in segments if s.byte_ranges()]
    by_range: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if not readable:
        return by_range
    store = LakeLocation.of(str(Path(store_dir).resolve()))
    tasks = plan_tasks(store, readable, parallelism=spark.sparkContext.defaultParallelism)
    writer = SegmentWriter(store, lake, tuple(tasks), run_id or uuid.uuid4().hex[:12], skip_corrupt)
    # One partition per task; only the tasks' numbers and the file descriptions cross the JVM.
    for row in spark.range(len(tasks), numPartitions=len(tasks)).mapInArrow(writer, FILE_INFO_DDL).collect():
        by_range[row["range_start"]].append(row.asDict())
    return by_range


def _commit_segment(lake: LakeLocation, broker: str, seal: SealedSegment, written: list[dict[str, Any]],
                    handles: TableHandles) -> ManifestEntry | None:
    from deltalake import Schema
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

    files = [f for f in written if f["table"] == MESSAGES_TABLE]
    key_files = [f for f in written if f["table"] == KEYS_TABLE]
    rows = sum(int(f["rows"]) for f in files)
    digest = combine(int(f["digest"]) for f in files)
    if rows != seal.rows or digest != seal.digest:
        raise VerificationError(
            f"segment [{seal.range_start}, {seal.range_end}): Spark wrote {rows} rows (digest {digest}) but the "
            f"segment holds {seal.rows} (digest {seal.digest}); nothing committed"
        )
    table = handles.fresh(MESSAGES_TABLE)
    if (table.transaction_version(broker) or -1) >= seal.range_end:
        return None
    # The keys first: a look-up that finds a key whose message is not committed yet finds no
    # row, while a message committed without its keys could not be found by key.
    if commit_key_files(lake, broker, seal, key_files, handles):
        crash_point("before-messages-commit")
    actions: list[AddAction | RemoveAction] = [
        AddAction(path=f["path"], size=int(f["size"]),
                  partition_values={"topic": f["topic"], "store_date": f["store_date"]},
                  modification_time=int(f["modification_time"]), data_change=True, stats=f["stats"])
        for f in files
    ]
    # Durable before the log names them, and the commit durable before the manifest (and so
    # hot retention) counts on it.
    lake.make_durable(lake.join(MESSAGES_TABLE, f["path"]) for f in files)
    now = int(time.time() * 1000)
    metadata = commit_metadata(broker, seal.file_name, seal.range_start, seal.range_end, rows, digest,
                               seal.queue_ends, seal.store_hosts)
    try:
        table.create_write_transaction(
            actions, mode="append", schema=Schema.from_arrow(MESSAGES_SCHEMA), partition_by=list(PARTITION_COLUMNS),
            commit_properties=CommitProperties(custom_metadata=metadata,
                                               app_transactions=[Transaction(broker, seal.range_end, now)]),
        )
    except CommitFailedError as exc:
        if (handles.fresh(MESSAGES_TABLE).transaction_version(broker) or -1) >= seal.range_end:
            log.info("range [%d, %d) was committed by another run", seal.range_start, seal.range_end)
            return None
        raise LakeError(f"Delta commit of [{seal.range_start}, {seal.range_end}) failed: {exc}") from exc
    version, committed_at = _commit_version(handles.fresh(MESSAGES_TABLE), broker, seal.range_end)
    make_log_durable(lake, MESSAGES_TABLE)
    return ManifestEntry(seal.range_start, seal.range_end, seal.file_name, version, rows, digest, False, committed_at,
                         queue_ends_recorded=seal.queue_ends is not None, store_hosts=seal.store_hosts)


def _commit_version(table: Any, broker: str, range_end: int) -> tuple[int, int]:
    """(version, commit timestamp ms) of the commit of ``broker``'s range ending at ``range_end``;
    the log's timestamp, so a manifest rebuilt from the log is equal to the saved one."""
    from lakemq.tiering.tables import META_BROKER, META_RANGE_END

    for commit in table.history(limit=20):
        if commit.get(META_BROKER) == broker and int(commit.get(META_RANGE_END, -1)) == range_end:
            return int(commit["version"]), int(commit.get("timestamp", 0))
    raise LakeError(f"committed range ending at {range_end} is not in the recent Delta history")


def compact(
    spark: SparkSession,
    *,
    store_dir: str | Path,
    lake_uri: str,
    broker_name: str,
    storage_options: Mapping[str, str] | None = None,
    seal_idle_ms: int = 10 * 60_000,
    boundary_stride: int = 8 << 20,
    skip_corrupt: bool = False,
    checkpoint_interval: int = 10,
    progress: Progress | None = None,
    flushed: bool = False,
) -> CompactResult:
    """Move every sealed, not yet committed CommitLog range of ``store_dir`` into the lake;
    ``flushed``: first seal every whole record the broker has flushed, full file or not."""
    began = time.monotonic()
    lake = LakeLocation.of(lake_uri, storage_options)
    lake.check_reachable()
    for table in (MESSAGES_TABLE, KEYS_TABLE):
        repair_torn_log(lake, table)
    ensure_table(lake, checkpoint_interval=checkpoint_interval)
    ensure_key_index(spark, lake, checkpoint_interval=checkpoint_interval)
    manifest = Manifest.open(lake, broker_name)
    from deltalake import DeltaTable

    txn = DeltaTable(lake.table_uri(MESSAGES_TABLE), storage_options=lake.delta_options()).transaction_version(broker_name)
    committed_end = max(txn or 0, manifest.committed_end)
    # Sealed from what the lake holds on: the same CommitLog tiered from another store of the
    # broker (its slave's) continues there instead of committing those records again.
    new_seals = seal_segments(store_dir, idle_ms=seal_idle_ms, stride=boundary_stride, from_offset=committed_end,
                              flushed=flushed)
    pending = pending_segments(store_dir, committed_end)
    skipped = tuple(c for s in pending for c in s.corrupt)
    if skipped and not skip_corrupt:
        a, b = skipped[0]
        raise CorruptSegmentError(
            f"CommitLog bytes [{a}, {b}) hold no valid record; rerun with skip_corrupt to leave them out", a)
    if pending and manifest.committed_end and pending[0].range_start != manifest.committed_end:
        log.warning("CommitLog offsets [%d, %d) were never tiered (files gone before tiering)",
                    manifest.committed_end, pending[0].range_start)
    if progress:
        progress("write", 0, len(pending))
    if pending:
        crash_point("before-write")
    files = write_segment_files(spark, store_dir=store_dir, lake=lake, segments=pending, skip_corrupt=skip_corrupt)
    if progress:
        progress("write", len(pending), len(pending))  # one Spark job wrote every pending range
    if pending:
        crash_point("before-commit")
    committed: list[ManifestEntry] = []
    raced: list[int] = []
    handles = TableHandles(lake)
    for i, seal in enumerate(pending):
        entry = _commit_segment(lake, broker_name, seal, files.get(seal.range_start, []), handles)
        if entry is None:
            raced.append(seal.range_start)
        else:
            committed.append(entry)
            crash_point("before-manifest")
            manifest = manifest.with_entries([entry], seal.queue_ends)
        if progress:
            progress("commit", i + 1, len(pending))
    if raced:
        manifest = manifest.reconcile(lake)
    # Saved once for the run (the whole document each time made a run's cost grow with the
    # lake's age): a crash before this leaves commits the next run's reconcile finds in the log,
    # and nothing counts on an entry before verification marks it, after this.
    manifest.save(lake)
    return CompactResult(
        committed=tuple(committed), already_committed=tuple(raced), sealed=len(new_seals),
        rows=sum(e.rows for e in committed),
        bytes_in=sum(s.range_end - s.range_start for s in pending if s.range_start not in raced),
        skipped_corrupt=skipped, seconds=time.monotonic() - began,
    )
