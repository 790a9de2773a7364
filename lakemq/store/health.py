"""StoreHealth: whether the store may take puts now (RocketMQ's RunningFlags, disk and dispatch
parts), and the counts the broker's metrics show.

A put is refused, with its reason, while

- the disk is full: the store's file system is used above ``diskSpaceWarningLevelRatio``
  (measured every 100 ms by the clean service thread; RocketMQ marks the disk full at the
  same ratio and refuses puts until it is below again);
- dispatch is failing: the reput could not build ConsumeQueue entries (a new ConsumeQueue file
  cannot be created on a full disk), so what a put adds could not be read;
- dispatch is more than ``maxDispatchBehindBytes`` behind the CommitLog's end.

Every put refused is counted by reason, and every dispatch failure is counted.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lakemq.store.config import StoreConfig
from lakemq.store.results import PutMessageResult, PutMessageStatus

__all__ = ["REFUSAL_REASONS", "StoreHealth", "disk_used_ratio"]

log = logging.getLogger(__name__)

REFUSAL_REASONS = ("disk_full", "dispatch_failed", "dispatch_behind")


def disk_used_ratio(path: Path) -> float:
    """Percent of the file system holding ``path`` that is allocated (RocketMQ's measure: total
    minus free blocks; blocks reserved for root count as free)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return 100.0 * (1 - st.f_bfree / st.f_blocks) if st.f_blocks else 0.0


class StoreHealth:
    def __init__(self, config: StoreConfig, dispatch_behind: Callable[[], int]) -> None:
        self._config = config
        self._dispatch_behind = dispatch_behind
        self._lock = threading.Lock()
        self.disk_used_ratio = 0.0
        self.disk_full = False
        self.dispatch_failure: str | None = None  # why the last reput pass failed, until one succeeds
        self.dispatch_failures = 0  # reput passes that failed
        self.dispatch_too_far_behind = False
        self.refused_puts: Counter[str] = Counter()
        # What a put gets now (reason, result); None: puts are taken. Read without the lock on
        # the put path: one attribute read.
        self.refusal: tuple[str, PutMessageResult] | None = None

    def check(self) -> None:
        """Measure the disk and the dispatch lag (the clean service thread, every 100 ms)."""
        ratio = disk_used_ratio(self._config.root_dir)
        full = ratio > self._config.disk_space_warning_level_ratio
        behind = self._dispatch_behind()
        too_far = behind > self._config.max_dispatch_behind_bytes
        with self._lock:
            self.disk_used_ratio = ratio
            if full != self.disk_full:
                if full:
                    log.error("disk of %s is %.1f%% used, above diskSpaceWarningLevelRatio %d%%: disk marked "
                              "full, puts are refused", self._config.root_dir, ratio,
                              self._config.disk_space_warning_level_ratio)
                else:
                    log.warning("disk of %s is %.1f%% used: disk OK again, puts are taken", self._config.root_dir,
                                ratio)
            if too_far != self.dispatch_too_far_behind:
                if too_far:
                    log.error("dispatch is %d bytes behind the CommitLog (maxDispatchBehindBytes %d): puts are "
                              "refused", behind, self._config.max_dispatch_behind_bytes)
                else:
                    log.warning("dispatch caught up (%d bytes behind): puts are taken", behind)
            self.disk_full, self.dispatch_too_far_behind = full, too_far
            self._update()

    def dispatch_failed(self, offset: int, error: BaseException) -> None:
        with self._lock:
            self.dispatch_failures += 1
            self.dispatch_failure = f"dispatch failed at CommitLog offset {offset}: {error}"
            self._update()

    def dispatch_resumed(self) -> None:
        with self._lock:
            self.dispatch_failure = None
            self._update()

    def _update(self) -> None:
        c = self._config
        if self.disk_full:
            self.refusal = ("disk_full", PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                remark=f"disk full: {self.disk_used_ratio:.1f}% of the store's file system used "
                       f"(diskSpaceWarningLevelRatio {c.disk_space_warning_level_ratio}%)"))
        elif self.dispatch_failure is not None:
            self.refusal = ("dispatch_failed", PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                remark=f"{self.dispatch_failure}; stored messages cannot be made readable"))
        elif self.dispatch_too_far_behind:
            self.refusal = ("dispatch_behind", PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                remark=f"dispatch is more than {c.max_dispatch_behind_bytes} bytes behind the CommitLog"))
        else:
            self.refusal = None

    def refused_put(self) -> PutMessageResult | None:
        """The put path: the refusal (counted) or None."""
        refusal = self.refusal
        if refusal is None:
            return None
        self.refused_puts[refusal[0]] += 1
        return refusal[1]
