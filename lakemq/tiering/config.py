"""The tiering part of broker.conf (camelCase keys, bound with lakemq.common.config.bind)."""

from __future__ import annotations

from dataclasses import dataclass

from lakemq.errors import ConfigError

__all__ = ["TieringConfig"]


@dataclass(frozen=True, slots=True)
class TieringConfig:
    lake_uri: str = "lake"  # a local directory or s3://bucket/prefix
    # The last CommitLog file is sealed up to its last record once nothing was written for this long.
    tier_seal_idle_ms: int = 10 * 60_000
    # A sealed segment's boundary index marks the first record starting in every stride.
    tier_boundary_stride: int = 8 << 20
    tier_hot_retention_enable: bool = True
    tier_target_file_size: int = 128 << 20  # optimize compacts small Parquet files up to this
    tier_vacuum_retention_hours: int = 168
    tier_checkpoint_interval: int = 10  # Delta commits between checkpoints

    def __post_init__(self) -> None:
        for name in ("tier_seal_idle_ms", "tier_boundary_stride", "tier_target_file_size",
                     "tier_checkpoint_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.tier_vacuum_retention_hours < 0:
            raise ConfigError("tier_vacuum_retention_hours must be >= 0")
