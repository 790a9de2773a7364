"""Fault injection for lakemq's own fault tests, driven by environment variables.

Unset (always, in production) each hook is one environment look-up on a path that is not hot
per message.

- ``LAKEMQ_FAULT_STAGE=<stage>``: a process kills itself with SIGKILL when it reaches that
  stage of the tiering job, so tests prove a re-run converges to exactly one copy of every
  row and that no local file goes before the lake holds it. Stages: ``before-write``,
  ``before-commit``, ``before-messages-commit`` (a range's keys committed, its messages not),
  ``before-manifest``, ``during-retention``.
- ``LAKEMQ_FAULT_FSYNC_DELAY_MS=<ms>``: every store fsync (CommitLog and ConsumeQueue files) first sleeps that long, a slow
  disk, so tests can see SYNC_FLUSH answer FLUSH_DISK_TIMEOUT without corrupting anything.
- ``LAKEMQ_FAULT_APPEND_STALL_MS=<ms>``: every CommitLog append holds the append lock that much
  longer, a stalled page cache, so tests can see the broker's flow control (osPageCacheBusy,
  waitTimeMillsInSendQueue). Read once when the CommitLog is built.
- ``LAKEMQ_FAULT_STABLE_WRITES=1``: the store's device is taken to require stable pages (an
  append may wait for writeback), so a SYNC_FLUSH broker appends in its send pool as it would
  on such a device (lakemq.store.device). Read once when the store starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

__all__ = ["STAGES", "append_stall_seconds", "crash_point", "crash_points_off", "slow_disk", "slow_disk_ms",
           "stable_writes_forced"]

STAGES = ("before-write", "before-commit", "before-messages-commit", "before-manifest", "during-retention")

_crash_points_off = False


def crash_point(stage: str) -> None:
    if not _crash_points_off and os.environ.get("LAKEMQ_FAULT_STAGE") == stage:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def crash_points_off() -> Iterator[None]:
    """No crash point fires inside (in this process): for a job's own scratch work that is not
    what a fault test kills (``tier serve``'s warm-up pass)."""
    global _crash_points_off
    before, _crash_points_off = _crash_points_off, True
    try:
        yield
    finally:
        _crash_points_off = before


def slow_disk() -> None:
    delay = slow_disk_ms()
    if delay:
        time.sleep(delay / 1000)


def slow_disk_ms() -> int:
    """The fsync delay in force (0: none); the SYNC_FLUSH commit thread sleeps it in C."""
    return int(os.environ.get("LAKEMQ_FAULT_FSYNC_DELAY_MS") or 0)


def append_stall_seconds() -> float:
    return int(os.environ.get("LAKEMQ_FAULT_APPEND_STALL_MS") or 0) / 1000


def stable_writes_forced() -> bool:
    return os.environ.get("LAKEMQ_FAULT_STABLE_WRITES") == "1"
