"""Hot retention: local CommitLog files go only once the lake verifiably holds them, and only
as the broker's own retention would let them go.

A running broker does not delete through here: its store calls :func:`retention_guard`'s
function and never deletes past the offset it returns (it applies ``fileReservedTime`` and
the disk ratios itself). ``lakemq tier run`` deletes directly, and follows the same rules
(:class:`RetentionRules`): a file goes when

- every byte of ``[file start, file end)`` lies in ranges the manifest marks committed AND
  verified, and so does every older file (the CommitLog must stay contiguous);
- it is not the newest file (the writer's);
- it was last written ``fileReservedTime`` hours ago or more;
- the broker can read it back: its conf's ``lakeUri`` is this lake (cold reads). A broker
  without one would lose those offsets, so its files are kept unless the user asks to delete
  them anyway (``delete_without_cold_reads``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lakemq.common.config import bind
from lakemq.common.durable import fsync_dir
from lakemq.common.faults import crash_point
from lakemq.store.config import StoreConfig
from lakemq.tiering.config import DELETE_WITHOUT_COLD_READS_FLAG
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.seal import CommitLogFile, commitlog_files, load_seals, seal_dir

__all__ = ["RetentionOutcome", "RetentionRules", "apply_retention",
           "deletable_files", "retention_guard", "verified_files"]

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class RetentionRules:
    file_reserved_ms: int  # the broker's fileReservedTime
    broker_reads_lake: bool  # the broker's lakeUri is the lake the files went to
    delete_without_cold_reads: bool = False

    @classmethod
    def for_broker(cls, props: Mapping[str, str], lake: LakeLocation, *,
                   delete_without_cold_reads: bool = False) -> RetentionRules:
        """The rules of the broker whose conf is ``props``, for files tiered into ``lake``."""
        broker_lake = props.get("lakeUri") or props.get("lake_uri") or ""
        reads = bool(broker_lake) and LakeLocation.of(broker_lake).uri == lake.uri
        reserved_h = bind(StoreConfig, props).file_reserved_time
        return cls(reserved_h * 3_600_000, reads, delete_without_cold_reads)


@dataclass(frozen=True, slots=True)
class RetentionOutcome:
    deleted: tuple[str, ...] = ()  # CommitLog file names
    kept: tuple[str, ...] = ()  # verified in the lake, but kept (why_kept says why)
    why_kept: str = ""


def _covered_to(manifest: Manifest, start: int) -> int:
    """How far from ``start`` verified ranges reach without a gap."""
    pos = start
    for e in sorted((e for e in manifest.entries if e.verified), key=lambda e: e.range_start):
        if e.range_start <= pos < e.range_end:
            pos = e.range_end
    return pos


def verified_files(store_dir: str | Path, manifest: Manifest) -> list[CommitLogFile]:
    """The oldest CommitLog files, up to the first the lake does not verifiably hold, never the
    newest: deleting a later file alone would leave a hole in the CommitLog."""
    out = []
    for f in commitlog_files(store_dir)[:-1]:
        if _covered_to(manifest, f.start) < f.end:
            break
        out.append(f)
    return out


def deletable_files(store_dir: str | Path, manifest: Manifest, rules: RetentionRules,
                    now_ms: int | None = None) -> tuple[list[CommitLogFile], list[CommitLogFile], str]:
    """(files that may go, verified files that stay, why they stay)."""
    verified = verified_files(store_dir, manifest)
    if not rules.broker_reads_lake and not rules.delete_without_cold_reads:
        return [], verified, (
            "the broker's conf has no lakeUri naming this lake, so the broker could not serve those offsets "
            f"from the lake ({DELETE_WITHOUT_COLD_READS_FLAG} deletes them anyway)")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    expired = []
    for f in verified:
        if now - f.mtime_ms < rules.file_reserved_ms:
            break
        expired.append(f)
    young = verified[len(expired):]
    hours = rules.file_reserved_ms / 3_600_000
    return expired, young, (f"written less than fileReservedTime ({hours:g} h) ago" if young else "")


def apply_retention(store_dir: str | Path, manifest: Manifest, rules: RetentionRules,
                    now_ms: int | None = None) -> RetentionOutcome:
    """Delete what :func:`deletable_files` allows, with the files' seals."""
    gone, kept, why = deletable_files(store_dir, manifest, rules, now_ms)
    starts = {f.start for f in gone}
    for f in gone:
        f.path.unlink()
        log.info("deleted tiered CommitLog file %s", f.path.name)
        crash_point("during-retention")
    for seal in load_seals(store_dir):
        if seal.file_start in starts:
            (seal_dir(store_dir) / f"{seal.range_start:020d}.json").unlink(missing_ok=True)
    if gone:
        # Once per run, not per file: a deletion the power cut rolls back only brings back a
        # file the lake holds too, which the next run deletes again.
        fsync_dir(gone[0].path.parent)
        if seal_dir(store_dir).is_dir():
            fsync_dir(seal_dir(store_dir))
    if kept:
        log.info("kept %d verified CommitLog file(s): %s", len(kept), why)
    return RetentionOutcome(tuple(f.path.name for f in gone), tuple(f.path.name for f in kept), why)


def retention_guard(lake: LakeLocation, broker: str) -> Callable[[], int]:
    """For MessageStore.set_retention_guard: the CommitLog offset below which the lake holds
    every byte, verified (re-read from the manifest on each call)."""

    def guard() -> int:
        manifest = Manifest.load(lake, broker)
        return manifest.verified_end if manifest else 0

    return guard
