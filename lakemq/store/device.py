"""Whether a write into a mapped file page may wait for that page's writeback.

A device that requires *stable pages* (queue/stable_writes: integrity or checksumming
devices; btrfs and other filesystems that checksum data ask for them on every device) makes
a write to a page under writeback wait until the write-out ends. The CommitLog's last page is
under writeback for most of each SYNC_FLUSH fdatasync, so on such a device an append can wait
for the disk, while elsewhere it is a copy into the page cache (the write fault that follows
a flush only marks the page dirty again). The broker appends SYNC_FLUSH sends on its event
loop only when this says no.
"""

from __future__ import annotations

import os
from pathlib import Path

from lakemq.common.faults import stable_writes_forced

__all__ = ["appends_may_wait_for_writeback"]

_SYS = Path("/sys")


def appends_may_wait_for_writeback(path: Path, sys_root: Path = _SYS) -> bool:
    """True unless the block device holding ``path`` (or, before it is made, its nearest
    existing parent) is known not to need stable pages. An unknown answer is True: a
    filesystem on no block device of its own (btrfs, overlayfs, NFS, FUSE: device major 0),
    or a kernel without ``queue/stable_writes``."""
    if stable_writes_forced():
        return True
    while not path.exists() and path != path.parent:
        path = path.parent
    device = os.stat(path).st_dev
    major, minor = os.major(device), os.minor(device)
    if major == 0:
        return True
    block = sys_root / "dev" / "block" / f"{major}:{minor}"
    try:
        block = block.resolve(strict=True)
    except OSError:
        return True
    if (block / "partition").exists():  # a partition's queue is its disk's
        block = block.parent
    try:
        return (block / "queue" / "stable_writes").read_text().strip() != "0"
    except OSError:
        return True
