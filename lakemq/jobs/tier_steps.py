"""The tiering pass split into its steps, one call each: seal, compact, verify, retention, maintain.

:func:`lakemq.jobs.tier_run.tier_run` runs the pass in one process; a scheduler that shows
each step as its own task (``dags/lakemq_tiering.py``) calls :func:`run_step` once per step,
each in a fresh process. Every step is idempotent, as in ``tier_run``: a step that died is
finished by running it again, and a step that finds nothing to do does nothing.

Settings arrive as a plain mapping (what a scheduler can pass between processes):
``store_dir`` (the broker's ``--data-dir``; else the conf's ``storePathRootDir``, else
``~/lakemq-data``, as the broker resolves it), ``broker_name``, ``lake_uri`` (else the conf's
``lakeUri``; neither is an error), ``broker_conf`` (the broker's broker.conf, read as the broker
reads it: its tiering keys, ``fileReservedTime`` and ``lakeUri`` apply),
``conf`` (camelCase overrides such as ``{"tierSealIdleMs": "60000"}``), ``storage_options``,
``master`` (Spark), ``flushed`` (seal every whole record the broker has flushed, as
``tier run --flushed``) and ``delete_hot_files_without_cold_reads`` (retention deletes verified files
even when the broker's conf has no ``lakeUri`` naming this lake). Each step returns a JSON-able
summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.common.config import bind
from lakemq.errors import ConfigError
from lakemq.jobs.tier_run import Progress
from lakemq.store.config import check_store_root, store_root
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.retention import RetentionRules

__all__ = ["STEPS", "TierSettings", "compact", "maintain", "retention", "run_step", "seal", "verify"]

STEPS = ("seal", "compact", "verify", "retention", "maintain")

Summary = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TierSettings:
    store_dir: Path
    broker_name: str
    config: TieringConfig
    storage_options: Mapping[str, str] = field(default_factory=dict)
    master: str | None = None
    # The broker's conf (for its retention rules) and whether to delete without cold reads.
    broker_props: Mapping[str, str] = field(default_factory=dict)
    delete_without_cold_reads: bool = False
    flushed: bool = False  # seal every whole record the broker has flushed, not only full or idle files

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TierSettings:
        """Explicit values win over the broker.conf's, which win over the defaults."""
        known = {"store_dir", "broker_name", "lake_uri", "broker_conf", "conf", "storage_options", "master",
                 "delete_hot_files_without_cold_reads", "flushed"}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown tiering setting(s): {', '.join(sorted(unknown))}")
        props = read_broker_conf(values.get("broker_conf") or None, values.get("conf"))
        lake: dict[str, Any] = {"lake_uri": str(values["lake_uri"])} if values.get("lake_uri") else {}
        flag = values.get("delete_hot_files_without_cold_reads", False)
        flushed = values.get("flushed", False)
        return cls(
            store_dir=store_root(props, values.get("store_dir") or None),
            broker_name=str(values.get("broker_name") or props.get("brokerName", "broker-a")),
            config=bind(TieringConfig, props, **lake),
            storage_options={str(k): str(v) for k, v in (values.get("storage_options") or {}).items()},
            master=values.get("master") or None,
            broker_props=props,
            delete_without_cold_reads=_truthy(flag),
            flushed=_truthy(flushed),
        )

    @property
    def lake(self) -> LakeLocation:
        return LakeLocation.of(self.config.lake_uri, self.storage_options)

    @property
    def retention_rules(self) -> RetentionRules:
        return RetentionRules.for_broker(self.broker_props, self.lake,
                                         delete_without_cold_reads=self.delete_without_cold_reads)


def _truthy(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("true", "1", "yes")


def seal(settings: TierSettings, *, now_ms: int | None = None) -> Summary:
    """Seal what became final by ``now_ms`` (a scheduler passes its data interval's end, so a
    re-run of the same interval seals the same files)."""
    from lakemq.tiering.seal import seal_segments

    new = seal_segments(
        settings.store_dir,
        idle_ms=settings.config.tier_seal_idle_ms,
        stride=settings.config.tier_boundary_stride,
        now_ms=now_ms,
        flushed=settings.flushed,
    )
    return {
        "sealed": len(new),
        "rows": sum(s.rows for s in new),
        "ranges": [[s.range_start, s.range_end] for s in new],
    }


def compact(settings: TierSettings, progress: Progress | None = None) -> Summary:
    """Commit every sealed, not yet committed range to the Delta table (one Spark session)."""
    from pyspark.sql import SparkSession

    from lakemq.jobs.compact import compact as compact_job
    from lakemq.jobs.session import build_session

    owned = SparkSession.getActiveSession() is None  # a caller's session stays up
    spark = build_session(master=settings.master, app_name="lakemq-tier-compact")
    try:
        result = compact_job(
            spark,
            store_dir=settings.store_dir,
            lake_uri=settings.config.lake_uri,
            broker_name=settings.broker_name,
            storage_options=settings.storage_options,
            seal_idle_ms=settings.config.tier_seal_idle_ms,
            boundary_stride=settings.config.tier_boundary_stride,
            checkpoint_interval=settings.config.tier_checkpoint_interval,
            progress=progress,
            flushed=settings.flushed,
        )
    finally:
        if owned:
            spark.stop()
    return {
        "committed": [[e.range_start, e.range_end, e.delta_version] for e in result.committed],
        "already_committed": list(result.already_committed),
        "rows": result.rows,
        "bytes_in": result.bytes_in,
        "seconds": round(result.seconds, 3),
    }


def verify(settings: TierSettings, progress: Progress | None = None) -> Summary:
    """Check committed ranges against their segments' digests; raises VerificationError."""
    from lakemq.tiering.verify import verify_manifest

    lake = settings.lake
    counted = (lambda done, total: progress("verify", done, total)) if progress else None
    manifest, counts = verify_manifest(lake, settings.store_dir, Manifest.open(lake, settings.broker_name), counted)
    manifest.save(lake)
    return {
        "verified": len(counts),
        "rows": sum(c.rows for c in counts.values()),
        "verified_end": manifest.verified_end,
    }


def retention(settings: TierSettings) -> Summary:
    """Delete local CommitLog files the lake verifiably holds, as the broker's retention rules
    allow (when hot retention is on); the summary also lists the verified files kept and why."""
    from lakemq.tiering.retention import apply_retention

    if not settings.config.tier_hot_retention_enable:
        return {"deleted": [], "kept": [], "why_kept": "tierHotRetentionEnable is false", "enabled": False}
    manifest = Manifest.open(settings.lake, settings.broker_name)
    outcome = apply_retention(settings.store_dir, manifest, settings.retention_rules)
    return {"deleted": list(outcome.deleted), "kept": list(outcome.kept), "why_kept": outcome.why_kept,
            "enabled": True}


def maintain(settings: TierSettings) -> Summary:
    """Optimize, vacuum and checkpoint the table."""
    from lakemq.jobs.maintain import maintain as maintain_job

    result = maintain_job(
        settings.config.lake_uri,
        storage_options=settings.storage_options,
        target_size=settings.config.tier_target_file_size,
        vacuum_retention_hours=settings.config.tier_vacuum_retention_hours,
    )
    return {
        "files_added": result.files_added,
        "files_removed": result.files_removed,
        "vacuumed": len(result.vacuumed),
        "checkpoint_version": result.checkpoint_version,
    }


_STEP_FUNCTIONS: Mapping[str, Callable[[TierSettings], Summary]] = {
    "retention": retention,
    "maintain": maintain,
}


def run_step(step: str, values: Mapping[str, Any], *, now_ms: int | None = None,
             progress: Progress | None = None) -> Summary:
    """Run one step with settings given as a mapping (see the module docstring); ``progress``
    hears the counted steps of compact and verify (what a scheduler's log shows as they go)."""
    if step not in STEPS:
        raise ConfigError(f"unknown tiering step {step!r}; the steps are {', '.join(STEPS)}")
    settings = TierSettings.from_mapping(values)
    check_store_root(settings.store_dir)
    if step == "seal":
        return seal(settings, now_ms=now_ms)
    if step == "compact":
        return compact(settings, progress)
    if step == "verify":
        return verify(settings, progress)
    return _STEP_FUNCTIONS[step](settings)
