"""Hot retention: local CommitLog files go only once the lake verifiably holds them.

A file may be deleted when every byte of ``[file start, file end)`` lies in ranges the
manifest marks committed AND verified, and it is not the newest file (the writer's).
A running broker does not delete through here: its store calls :func:`retention_guard`'s
function and never deletes past the offset it returns. ``lakemq tier run`` deletes
directly, for stores whose broker is stopped or whose old files it no longer maps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from lakemq.common.faults import crash_point
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.seal import commitlog_files, load_seals, seal_dir

__all__ = ["deletable_files", "delete_tiered_files", "retention_guard"]

log = logging.getLogger(__name__)


def _covered_to(manifest: Manifest, start: int) -> int:
    """How far from ``start`` verified ranges reach without a gap."""
    pos = start
    for e in sorted((e for e in manifest.entries if e.verified), key=lambda e: e.range_start):
        if e.range_start <= pos < e.range_end:
            pos = e.range_end
    return pos


def deletable_files(store_dir: str | Path, manifest: Manifest) -> list[Path]:
    files = commitlog_files(store_dir)
    return [f.path for f in files[:-1] if _covered_to(manifest, f.start) >= f.end]


def delete_tiered_files(store_dir: str | Path, manifest: Manifest) -> list[Path]:
    """Delete the deletable CommitLog files and their seal files; returns what went."""
    gone = deletable_files(store_dir, manifest)
    starts = {int(p.name) for p in gone}
    for path in gone:
        path.unlink()
        log.info("deleted tiered CommitLog file %s", path.name)
        crash_point("during-retention")
    for seal in load_seals(store_dir):
        if seal.file_start in starts:
            (seal_dir(store_dir) / f"{seal.range_start:020d}.json").unlink(missing_ok=True)
    return gone


def retention_guard(lake: LakeLocation, broker: str) -> Callable[[], int]:
    """For MessageStore.set_retention_guard: the CommitLog offset below which the lake holds
    every byte, verified (re-read from the manifest on each call)."""

    def guard() -> int:
        manifest = Manifest.load(lake, broker)
        return manifest.verified_end if manifest else 0

    return guard
