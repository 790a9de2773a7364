"""The lake jobs' parts of broker.conf (camelCase keys, bound with lakemq.common.config.bind):
tiering, the delay sweep and the transaction sweep. One broker.conf serves the broker and the
jobs, so the broker accepts these keys (LAKE_JOB_CONFIGS) and the jobs read the broker's."""

from __future__ import annotations

from dataclasses import dataclass

from lakemq.errors import ConfigError

__all__ = ["DELETE_WITHOUT_COLD_READS_FLAG", "LAKE_JOB_CONFIGS", "DelaySweepConfig", "TieringConfig",
           "TransactionSweepConfig"]

# ``tier run``'s flag to delete verified hot files a broker without cold reads (no lakeUri
# naming the lake) could not read back.
DELETE_WITHOUT_COLD_READS_FLAG = "--delete-hot-files-without-cold-reads"


@dataclass(frozen=True, slots=True)
class TieringConfig:
    lake_uri: str = ""  # a local directory or s3://bucket/prefix; none: every lake job refuses to run
    # The last CommitLog file is sealed up to its last record once nothing was written for this long.
    tier_seal_idle_ms: int = 10 * 60_000
    # A sealed segment's boundary index marks the first record starting in every stride.
    tier_boundary_stride: int = 8 << 20
    tier_hot_retention_enable: bool = True
    tier_target_file_size: int = 128 << 20  # optimize compacts small Parquet files up to this
    tier_vacuum_retention_hours: int = 168
    tier_checkpoint_interval: int = 10  # Delta commits between checkpoints
    # ``tier serve`` commits what the broker has flushed within this long (ms): the lake lag its
    # passes aim for (lakemq.tiering.pass_schedule).
    tier_interval_ms: int = 60_000
    # ``tier serve`` optimizes, vacuums and checkpoints the table at most this often (ms).
    tier_maintain_interval_ms: int = 10 * 60_000
    # ``tier serve`` also serves Spark Connect here (host:port) from its warm session, with the
    # lake's tables; lake commands given this broker.conf use it when reachable. Empty: off.
    lake_service_addr: str = ""

    def __post_init__(self) -> None:
        if self.lake_service_addr:
            host, sep, port = self.lake_service_addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"lakeServiceAddr must be host:port, got {self.lake_service_addr!r}")
        for name in ("tier_seal_idle_ms", "tier_boundary_stride", "tier_target_file_size",
                     "tier_checkpoint_interval", "tier_interval_ms", "tier_maintain_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.tier_vacuum_retention_hours < 0:
            raise ConfigError("tier_vacuum_retention_hours must be >= 0")


@dataclass(frozen=True, slots=True)
class DelaySweepConfig:
    delay_sweep_grace_ms: int = 10 * 60_000
    delay_sweep_batch: int = 32

    def __post_init__(self) -> None:
        if self.delay_sweep_grace_ms < 0 or self.delay_sweep_batch <= 0:
            raise ConfigError("delaySweepGraceMs must be >= 0 and delaySweepBatch > 0")


@dataclass(frozen=True, slots=True)
class TransactionSweepConfig:
    transaction_sweep_batch: int = 256  # half messages per request to a broker

    def __post_init__(self) -> None:
        if not 0 < self.transaction_sweep_batch <= 1024:
            raise ConfigError("transactionSweepBatch must be within 1..1024")


LAKE_JOB_CONFIGS = (TieringConfig, DelaySweepConfig, TransactionSweepConfig)
