"""TieringLagProbe: how far the lake is behind this broker's CommitLog, for the metrics.

Read from the tiering manifest (``lakeUri``): the bytes past the manifest's committed end,
and the age of the oldest message not yet committed. A scrape runs on the metrics thread, never
the event loop; the manifest (maybe on object storage) is read at most every ``ttl_s``
seconds, so frequent scrapes cost one cached lookup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lakemq.store.message_store import MessageStore
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest

__all__ = ["TieringLag", "TieringLagProbe"]


@dataclass(frozen=True, slots=True)
class TieringLag:
    committed_end: int  # CommitLog offset up to which the lake holds every byte
    lag_bytes: int  # CommitLog bytes not yet committed to the lake
    oldest_age_seconds: float  # age of the oldest message not yet committed (0 when none)


class TieringLagProbe:
    def __init__(self, lake_uri: str, broker: str, store: Callable[[], MessageStore | None],
                 ttl_s: float = 5.0) -> None:
        self.lake = LakeLocation.of(lake_uri)
        self.broker = broker
        self._store = store
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, TieringLag] | None = None

    def lag(self) -> TieringLag | None:
        """The lag, at most ``ttl_s`` old; None before the store is loaded."""
        store = self._store()
        if store is None:
            return None
        with self._lock:  # concurrent scrapes share one manifest read
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self._ttl_s:
                self._cached = (now, self._measure(store))
            return self._cached[1]

    def _measure(self, store: MessageStore) -> TieringLag:
        manifest = Manifest.load(self.lake, self.broker)
        committed = manifest.committed_end if manifest else 0
        max_offset = store.get_max_phy_offset()
        # Bytes the CommitLog no longer holds are not waiting for the lake either.
        first_pending = max(committed, store.get_min_phy_offset())
        if first_pending >= max_offset:
            return TieringLag(committed, 0, 0.0)
        msg = store.look_message_by_offset(first_pending)
        age = time.time() - msg.store_timestamp / 1000 if msg is not None else 0.0
        return TieringLag(committed, max_offset - first_pending, max(0.0, age))
