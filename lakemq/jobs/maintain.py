"""Table upkeep through deltalake: small-file compaction, vacuum, checkpoints, for
``messages`` and its index ``message_keys``.

Segment commits add one small file per (segment, topic, day) to ``messages`` and one per
(segment, topic) to ``message_keys``; ``optimize`` rewrites a partition's small files into
files near ``target_size``; ``vacuum`` deletes files no
version within the retention window references (old optimize inputs, and files a dead
compaction run wrote but never committed); a checkpoint lets readers skip replaying JSON
commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakemq.errors import LakeError
from lakemq.jobs.lake_tables import table_exists
from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import KEYS_TABLE, MESSAGES_TABLE

__all__ = ["MaintainResult", "checkpoint", "maintain", "optimize", "vacuum"]


@dataclass(frozen=True, slots=True)
class MaintainResult:
    files_added: int
    files_removed: int
    vacuumed: tuple[str, ...]
    checkpoint_version: int


def _table(lake: LakeLocation, name: str = MESSAGES_TABLE) -> Any:
    from deltalake import DeltaTable

    uri = lake.table_uri(name)
    if not DeltaTable.is_deltatable(uri, storage_options=lake.delta_options()):
        raise LakeError(f"no Delta table at {uri}")
    return DeltaTable(uri, storage_options=lake.delta_options())


def optimize(lake: LakeLocation, *, target_size: int, table: str = MESSAGES_TABLE) -> tuple[int, int]:
    """Compact small files; returns (files added, files removed)."""
    metrics = _table(lake, table).optimize.compact(target_size=target_size)
    return int(metrics.get("numFilesAdded", 0)), int(metrics.get("numFilesRemoved", 0))


def vacuum(lake: LakeLocation, *, retention_hours: int, dry_run: bool = False, table: str = MESSAGES_TABLE) -> list[str]:
    """Delete unreferenced files older than ``retention_hours`` (0 is allowed: our readers
    always open the newest snapshot or an explicit version that is still referenced)."""
    return list(_table(lake, table).vacuum(retention_hours=retention_hours, dry_run=dry_run,
                                    enforce_retention_duration=False, full=True))


def checkpoint(lake: LakeLocation, table: str = MESSAGES_TABLE) -> int:
    delta = _table(lake, table)
    delta.create_checkpoint()
    return int(delta.version())


def maintain(
    lake_uri: str, *, storage_options: Mapping[str, str] | None = None, target_size: int = 128 << 20,
    vacuum_retention_hours: int = 168,
) -> MaintainResult:
    """Upkeep of both tables; the checkpoint version reported is ``messages``'."""
    lake = LakeLocation.of(lake_uri, storage_options)
    # A lake no compaction has touched since the index came has no message_keys yet.
    tables = [MESSAGES_TABLE, *([KEYS_TABLE] if table_exists(lake, KEYS_TABLE) else [])]
    added = removed = 0
    gone: list[str] = []
    versions: list[int] = []
    for table in tables:
        with reading_table(lake, table):
            more, fewer = optimize(lake, target_size=target_size, table=table)
            added, removed = added + more, removed + fewer
            gone += vacuum(lake, retention_hours=vacuum_retention_hours, table=table)
    for table in tables:
        with reading_table(lake, table):
            versions.append(checkpoint(lake, table))
    return MaintainResult(added, removed, tuple(gone), versions[0])
