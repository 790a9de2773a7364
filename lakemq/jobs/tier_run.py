"""One tiering pass: seal -> compact -> verify -> hot retention -> table upkeep.

What ``lakemq tier run`` and the scheduler call; every step is idempotent, so a pass that
died anywhere is finished by the next one. Hot retention deletes local CommitLog files only
as the broker's own rules allow (:class:`lakemq.tiering.retention.RetentionRules`); without
rules it deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakemq.jobs.compact import CompactResult, compact
from lakemq.jobs.maintain import MaintainResult, maintain
from lakemq.store.config import check_store_root
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.retention import RetentionOutcome, RetentionRules, apply_retention
from lakemq.tiering.tables import MESSAGES_TABLE
from lakemq.tiering.verify import verify_manifest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TierRunResult", "tier_run"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class TierRunResult:
    compact: CompactResult
    verified: int
    retention: RetentionOutcome  # deleted and kept local files
    maintain: MaintainResult | None

    @property
    def deleted(self) -> tuple[str, ...]:
        return self.retention.deleted


def tier_run(
    spark: SparkSession, *, store_dir: str | Path, broker_name: str, config: TieringConfig,
    storage_options: Mapping[str, str] | None = None, skip_corrupt: bool = False,
    retention: RetentionRules | None = None, upkeep: bool = True, progress: Progress | None = None,
    flushed: bool = False,
) -> TierRunResult:
    """One pass; ``flushed``: commit every whole record the broker has flushed, not only
    sealed (full or idle) files."""
    check_store_root(Path(store_dir))
    lake = LakeLocation.of(config.lake_uri, storage_options)
    with reading_table(lake, MESSAGES_TABLE):  # its commits; the key index's errors name their own table
        compacted = compact(
            spark, store_dir=store_dir, lake_uri=config.lake_uri, broker_name=broker_name,
            storage_options=storage_options, seal_idle_ms=config.tier_seal_idle_ms,
            boundary_stride=config.tier_boundary_stride, skip_corrupt=skip_corrupt,
            checkpoint_interval=config.tier_checkpoint_interval, progress=progress, flushed=flushed,
        )
    manifest = Manifest.open(lake, broker_name)
    verify_progress = (lambda done, total: progress("verify", done, total)) if progress else None
    manifest, counts = verify_manifest(lake, store_dir, manifest, verify_progress)
    manifest.save(lake)
    outcome = RetentionOutcome()
    if retention is not None and config.tier_hot_retention_enable:
        outcome = apply_retention(store_dir, manifest, retention)
    upkept = None
    if upkeep:
        if progress:
            progress("maintain", 0, 1)
        upkept = maintain(config.lake_uri, storage_options=storage_options, target_size=config.tier_target_file_size,
                          vacuum_retention_hours=config.tier_vacuum_retention_hours)
        if progress:
            progress("maintain", 1, 1)
    return TierRunResult(compacted, len(counts), outcome, upkept)
