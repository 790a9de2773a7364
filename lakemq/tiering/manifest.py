"""The tiering manifest: which CommitLog ranges of a broker are in the lake.

One JSON document per broker at ``{lake}/_lakemq/manifest/{broker}.json``, replaced in one
step (a local rename or a single object PUT). The Delta log is the truth: every segment
commit carries the range, row count and digest in its commit info and sets the app
transaction ``(broker, range_end)``. So a lost manifest, or one a crash left behind the
table, is rebuilt by :meth:`Manifest.reconcile` from the table's history; only the
``verified`` marks are local knowledge, and ranges found again start unverified.

The manifest also knows where each queue ended (``queue_ends``: the queue offset after its
last record in the lake, merged over the ranges whose commits recorded them), so a rebuild of
the ConsumeQueues (``lakemq reindex``) continues a queue whose records all left the local
disk from where it really ended. Each entry keeps the range's store hosts
(``store_hosts``, from its commit), which tell the broker's rows apart from other brokers'.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from lakemq.errors import LakeError
from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import QueueEnds, merge_queue_ends
from lakemq.tiering.tables import (
    MESSAGES_TABLE,
    META_BROKER,
    META_DIGEST,
    META_QUEUE_ENDS,
    META_RANGE_END,
    META_RANGE_START,
    META_ROWS,
    META_SEGMENT,
    META_STORE_HOSTS,
)

__all__ = ["Manifest", "ManifestEntry", "commit_hosts", "commit_metadata", "manifest_path"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    range_start: int
    range_end: int
    segment: str  # CommitLog file name
    delta_version: int
    rows: int
    digest: int
    verified: bool = False
    committed_at_ms: int = 0
    queue_ends_recorded: bool = False  # the commit recorded the range's queue ends
    store_hosts: tuple[str, ...] | None = None  # the range's store hosts; None: its commit lacks them


_ENTRY_FIELDS = tuple(f.name for f in fields(ManifestEntry))


def manifest_path(lake: LakeLocation, broker: str) -> str:
    return lake.join("_lakemq", "manifest", f"{broker}.json")


def commit_metadata(broker: str, segment: str, range_start: int, range_end: int, rows: int, digest: int,
                    queue_ends: QueueEnds | None = None, store_hosts: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The custom commit info of a segment commit (the digest as a string: it is a u64)."""
    meta: dict[str, Any] = {META_BROKER: broker, META_SEGMENT: segment, META_RANGE_START: range_start,
                            META_RANGE_END: range_end, META_ROWS: rows, META_DIGEST: str(digest)}
    if queue_ends is not None:
        meta[META_QUEUE_ENDS] = json.dumps(queue_ends, separators=(",", ":"))
    if store_hosts is not None:
        meta[META_STORE_HOSTS] = json.dumps(list(store_hosts), separators=(",", ":"))
    return meta


def commit_hosts(commit: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The store hosts a segment commit's info records; None for a commit written before
    they were recorded."""
    raw = commit.get(META_STORE_HOSTS)
    return None if raw is None else tuple(json.loads(raw))


@dataclass(frozen=True, slots=True)
class Manifest:
    broker: str
    entries: tuple[ManifestEntry, ...] = ()
    queue_ends: QueueEnds = field(default_factory=dict, compare=False)

    @property
    def committed_end(self) -> int:
        return max((e.range_end for e in self.entries), default=0)

    @property
    def verified_end(self) -> int:
        """End of the verified ranges that follow each other from the first one: hot
        retention may delete CommitLog bytes below this offset."""
        end = None
        for e in sorted(self.entries, key=lambda e: e.range_start):
            if not e.verified or (end is not None and e.range_start != end):
                break
            end = e.range_end
        return end or 0

    def entry(self, range_start: int) -> ManifestEntry | None:
        return next((e for e in self.entries if e.range_start == range_start), None)

    def with_entries(self, entries: Iterable[ManifestEntry], queue_ends: QueueEnds | None = None) -> Manifest:
        """The entries added (or replaced), and ``queue_ends`` (theirs) merged in."""
        by_start = {e.range_start: e for e in self.entries}
        by_start.update({e.range_start: e for e in entries})
        ends = merge_queue_ends(json.loads(json.dumps(self.queue_ends)), queue_ends or {})
        return replace(self, entries=tuple(sorted(by_start.values(), key=lambda e: e.range_start)), queue_ends=ends)

    def queue_ends_cover(self) -> tuple[int, int]:
        """[start, end): the CommitLog offsets whose ranges follow each other from the first
        entry and all recorded their queue ends (start == end: none)."""
        start = end = None
        for e in sorted(self.entries, key=lambda e: e.range_start):
            if not e.queue_ends_recorded or (end is not None and e.range_start != end):
                break
            start = e.range_start if start is None else start
            end = e.range_end
        return (start or 0, end or 0) if start is not None else (0, 0)

    def mark_verified(self, range_start: int) -> Manifest:
        entry = self.entry(range_start)
        if entry is None:
            raise LakeError(f"no manifest entry for range starting at {range_start}")
        return self.with_entries([replace(entry, verified=True)])

    # -- persistence ---------------------------------------------------------------------------

    @classmethod
    def load(cls, lake: LakeLocation, broker: str) -> Manifest | None:
        path = manifest_path(lake, broker)
        if not lake.exists(path):
            return None
        try:
            raw = json.loads(lake.read_bytes(path))
            entries = tuple(ManifestEntry(**{**e, "store_hosts": _hosts_tuple(e.get("store_hosts"))})
                            for e in raw["entries"])
            return cls(raw["broker"], entries, raw.get("queue_ends", {}))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("manifest %s is unreadable (%s); rebuilding it from the Delta log", path, exc)
            return None

    def save(self, lake: LakeLocation) -> None:
        # Field by field: asdict's deep copies were most of a save of a few thousand entries.
        doc = {"broker": self.broker, "entries": [{f: getattr(e, f) for f in _ENTRY_FIELDS} for e in self.entries],
               "queue_ends": self.queue_ends, "saved_at_ms": int(time.time() * 1000)}
        lake.write_bytes(manifest_path(lake, self.broker), json.dumps(doc, indent=1).encode())

    # -- rebuilding from the Delta log ---------------------------------------------------------

    def reconcile(self, lake: LakeLocation) -> Manifest:
        """Add every segment commit of this broker the Delta history has and the manifest
        lacks (a crash after commit, before the manifest was saved; or a lost manifest)."""
        from deltalake import DeltaTable

        with reading_table(lake, MESSAGES_TABLE):
            uri = lake.table_uri(MESSAGES_TABLE)
            if not DeltaTable.is_deltatable(uri, storage_options=lake.delta_options()):
                return self
            table = DeltaTable(uri, storage_options=lake.delta_options())
            known = {e.delta_version for e in self.entries}
            found = []
            ends: QueueEnds = {}
            for commit in table.history():
                if commit.get(META_BROKER) != self.broker or commit["version"] in known:
                    continue
                recorded = META_QUEUE_ENDS in commit
                if recorded:
                    merge_queue_ends(ends, json.loads(commit[META_QUEUE_ENDS]))
                found.append(ManifestEntry(
                    range_start=int(commit[META_RANGE_START]), range_end=int(commit[META_RANGE_END]),
                    segment=str(commit[META_SEGMENT]), delta_version=int(commit["version"]),
                    rows=int(commit[META_ROWS]), digest=int(commit[META_DIGEST]),
                    committed_at_ms=int(commit.get("timestamp", 0)), queue_ends_recorded=recorded,
                    store_hosts=commit_hosts(commit),
                ))
            if found:
                log.warning("manifest for %s lacked %d committed range(s); recovered them from the Delta log",
                            self.broker, len(found))
            merged = self.with_entries(found, ends)
            txn = table.transaction_version(self.broker)
            if txn is not None and txn > merged.committed_end:
                raise LakeError(
                    f"Delta app transaction of {self.broker} is at {txn} but its commit history ends at "
                    f"{merged.committed_end}: the log was cleaned past the manifest; restore the manifest file"
                )
            return merged

    @classmethod
    def open(cls, lake: LakeLocation, broker: str) -> Manifest:
        """The broker's manifest, brought up to date with the Delta log."""
        current = cls.load(lake, broker) or cls(broker)
        return current.reconcile(lake)


def _hosts_tuple(hosts: list[str] | None) -> tuple[str, ...] | None:
    return None if hosts is None else tuple(hosts)
