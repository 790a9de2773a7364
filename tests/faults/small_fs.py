"""A small file system for disk-space faults: a tmpfs, else an ext4 loop file."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["fill_to", "small_fs", "used_percent"]


@contextmanager
def small_fs(mount_point: Path, size_mib: int) -> Iterator[Path]:
    """Mount a ``size_mib`` file system at ``mount_point`` (created), unmounted afterwards;
    skips the test where mounting is not allowed."""
    mount_point.mkdir(parents=True, exist_ok=True)
    image = mount_point.parent / f"{mount_point.name}.img"
    failures: list[str] = []
    if not _ran(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)], failures):
        with open(image, "wb") as f:
            f.truncate(size_mib << 20)
        if not (_ran(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], failures)
                and _ran(["mount", "-o", "loop", str(image), str(mount_point)], failures)):
            pytest.skip(f"cannot mount a small file system here (needs mount rights): {'; '.join(failures)}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _ran(command: list[str], failures: list[str]) -> bool:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        failures.append(f"{' '.join(command[:3])}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.returncode == 0


def used_percent(path: Path) -> float:
    """As the store measures it: the share of blocks allocated."""
    st = os.statvfs(path)
    return 100.0 * (1 - st.f_bfree / st.f_blocks)


def fill_to(filler: Path, percent: float) -> None:
    """Grow (or shrink) ``filler`` so that its file system is ``percent`` used."""
    st = os.statvfs(filler.parent)
    have = filler.stat().st_size if filler.exists() else 0
    target = have + int((percent / 100 - (1 - st.f_bfree / st.f_blocks)) * st.f_blocks * st.f_frsize)
    with open(filler, "ab") as f:
        f.truncate(max(0, target))
        if target > have:
            os.posix_fallocate(f.fileno(), 0, target)
