"""Making files and directory entries survive a power cut, not only a killed process.

An fsync of a file makes its bytes durable, not its name: a file created or renamed is only
found after a power cut once its directory has been fsynced too (POSIX; ext4 and XFS lose
such entries in practice, docs/DURABILITY.md). Every writer of on-disk state goes through
these helpers: config tables, the checkpoint's and store files' creation, seals, the lake's
manifest on a local lake.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["create_file_durably", "fsync_dir", "make_dirs_durably", "replace_durably",
           "unlink_durably", "write_file_durably"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of directory ``path`` (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durably(path: str | os.PathLike[str]) -> None:
    """``mkdir -p`` whose new directories survive a power cut: each one created is followed
    by an fsync of its parent. Nothing is synced when every directory already exists."""
    target = Path(path).absolute()
    missing: list[Path] = []
    probe = target
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        fsync_dir(directory.parent)


def create_file_durably(path: str | os.PathLike[str]) -> None:
    """After a new file was created at ``path`` (and before anything that counts on it is
    acknowledged): make its directory entry durable."""
    fsync_dir(Path(path).parent)


def write_file_durably(path: str | os.PathLike[str], data: bytes | str, *, backup: bool = False) -> None:
    """Replace ``path`` with ``data`` in one step that survives a crash at any point and a
    power cut after it returns: a temporary copy is written and fsynced, renamed over
    ``path`` and the directory fsynced. With ``backup`` the old file first becomes
    ``{path}.bak`` (RocketMQ's ConfigManager keeps one). Writers of one path must take
    turns (the temporary name is unique, so a concurrent writer never renames a torn copy)."""
    target = Path(path)
    make_dirs_durably(target.parent)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if backup and target.exists():
            os.replace(target, target.with_name(target.name + ".bak"))
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)  # a torn copy would only hold space a full disk needs
        raise
    fsync_dir(target.parent)


def replace_durably(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace`` whose result survives a power cut: both directories are fsynced."""
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent.absolute() != Path(dst).parent.absolute():
        fsync_dir(Path(src).parent)


def unlink_durably(path: str | os.PathLike[str], *, missing_ok: bool = False) -> None:
    """Remove ``path`` so that a power cut cannot bring it back."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise
        return
    fsync_dir(Path(path).parent)
