"""A FUSE file system that loses, on command, everything a power cut would lose.

``python -m tests.powercut.lazyfs BACKING MOUNTPOINT`` serves ``BACKING/live`` at MOUNTPOINT,
every operation passed through, and keeps beside it what a disk with a volatile cache has
made durable (docs/DURABILITY.md, "The power-cut model"):

- a file's bytes and size: as of its last fsync or fdatasync (msync of a shared mapping
  arrives as the kernel's page-sized WRITE calls, then an fsync with datasync=1); until then
  its writes and truncates are pending. A file that existed at mount is durable as it was.
- a directory's entries (create, mkdir, rename, unlink, rmdir in it): as of its last fsync
  (fsyncdir). A file created and fsynced in a directory never fsynced is lost whole; a
  rename or unlink not followed by an fsync of the directory is rolled back.

A client connected to ``BACKING/control.sock`` sends ``cut`` (or ``cut tear``, ``cut
keep-names``): the file system stops accepting writes (the kernel's own write-back of pages the
killed processes dirtied is refused), and rebuilds ``BACKING/rebuilt`` from the durable state
alone; ``tear`` also persists a sector-aligned prefix of the last write no fsync covered (a
torn page); ``keep-names`` lets every pending create, rename and unlink reach the disk while
file data no fsync covered is still lost (a file system that journals only metadata).
After ``fusermount -u`` the daemon replaces ``live`` with ``rebuilt``; a new daemon then
mounts what a machine would find after the power came back.

Files are known by inode: a file unlinked or replaced keeps its durable copy, and an inode
number the backing file system reuses gets a new identity. A hard link is one more name of the
same file; after a cut each durable name holds its own copy of the file's durable bytes.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import socket
import stat
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]

SECTOR = 512


@dataclass(slots=True)
class Node:
    """One file or directory, under the identity it keeps across renames."""

    id: int
    is_dir: bool
    ino: int  # in BACKING/live; 0 once unlinked (its durable copy is then a blob or nothing)
    new: bool  # created since mount: durable content empty until an fsync
    blob: bool = False  # BACKING/durable/<id> holds the durable bytes
    dirty: list[tuple[int, int]] = field(default_factory=list)  # pending (offset, end) ranges
    resized: bool = False  # a truncate no fsync covered


class LazyState:
    """The durable state beside the live tree; every method runs under ``lock``."""

    def __init__(self, backing: Path) -> None:
        self.live = backing / "live"
        self.durable = backing / "durable"
        self.rebuilt = backing / "rebuilt"
        shutil.rmtree(self.durable, ignore_errors=True)
        self.durable.mkdir()
        self.lock = threading.RLock()
        self.cut = False
        self.nodes: dict[int, Node] = {}
        self.by_ino: dict[int, Node] = {}
        self.entries: dict[int, dict[str, int]] = {}  # directory id -> durable name -> node id
        self.last_write: tuple[int, int, bytes] | None = None  # node id, offset, data
        self.counts = {"writes": 0, "fsyncs": 0, "dir_fsyncs": 0}
        self.root = self._scan(self.live)

    # -- identities ---------------------------------------------------------------------------

    def _new_node(self, ino: int, is_dir: bool, new: bool) -> Node:
        node = Node(len(self.nodes) + 1, is_dir, ino, new)
        self.nodes[node.id] = node
        self.by_ino[ino] = node
        return node

    def _scan(self, directory: Path) -> Node:
        """At mount everything is durable: each directory's entries are its listing."""
        node = self._new_node(directory.lstat().st_ino, True, False)
        names: dict[str, int] = {}
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                names[entry.name] = self._scan(Path(entry.path)).id
            else:
                names[entry.name] = self._new_node(entry.inode(), False, False).id
        self.entries[node.id] = names
        return node

    def node_at(self, real: str) -> Node:
        st = os.lstat(real)
        node = self.by_ino.get(st.st_ino)
        if node is None:  # made behind our back cannot happen; keep going as if new
            node = self._new_node(st.st_ino, stat.S_ISDIR(st.st_mode), True)
        return node

    def created(self, real: str, is_dir: bool) -> Node:
        return self._new_node(os.lstat(real).st_ino, is_dir, True)

    # -- files ----------------------------------------------------------------------------------

    def _snapshot(self, node: Node, real: str | int) -> None:
        """Before the first change to a file durable since mount: keep its bytes as they are."""
        if node.blob or node.new or node.is_dir:
            return
        blob = self.durable / str(node.id)
        if isinstance(real, int):
            with open(blob, "wb") as out:
                out.write(_read_all(real))
        else:
            shutil.copyfile(real, blob)
        node.blob = True

    def before_change(self, node: Node, fd_or_path: str | int) -> None:
        if self.cut:
            raise FuseOSError(errno.EIO)
        self._snapshot(node, fd_or_path)

    def wrote(self, node: Node, offset: int, data: bytes) -> None:
        node.dirty.append((offset, offset + len(data)))
        self.last_write = (node.id, offset, bytes(data))
        self.counts["writes"] += 1

    def fsynced(self, node: Node, fd: int) -> None:
        """The file's bytes and size as they are now become durable."""
        if self.cut:
            raise FuseOSError(errno.EIO)
        self.counts["fsyncs"] += 1
        if not node.dirty and not node.resized:
            return
        size = os.fstat(fd).st_size
        blob = self.durable / str(node.id)
        with open(blob, "r+b" if node.blob else "wb") as out:
            for start, end in _merged(node.dirty):
                end = min(end, size)
                if start < end:
                    out.seek(start)
                    out.write(os.pread(fd, end - start, start))
            out.truncate(size)
        node.blob = True
        node.dirty.clear()
        node.resized = False
        if self.last_write is not None and self.last_write[0] == node.id:
            self.last_write = None

    def forget(self, node: Node, real: str) -> None:
        """``real`` is about to lose its last name: keep its durable bytes, free its inode number."""
        if self.cut:
            raise FuseOSError(errno.EIO)
        if not node.is_dir and os.lstat(real).st_nlink <= 1:
            self._snapshot(node, real)
            self.by_ino.pop(node.ino, None)
            node.ino = 0
        elif node.is_dir:
            self.by_ino.pop(node.ino, None)
            node.ino = 0

    # -- directories ------------------------------------------------------------------------------

    def dir_fsynced(self, node: Node, real: str, *, counted: bool = True) -> None:
        if self.cut and counted:
            raise FuseOSError(errno.EIO)
        self.counts["dir_fsyncs"] += counted
        self.entries[node.id] = {name: self.node_at(os.path.join(real, name)).id for name in os.listdir(real)}

    # -- the power cut ------------------------------------------------------------------------------

    def power_cut(self, tear: bool, keep_names: bool = False) -> dict[str, Any]:
        """Refuse every later change and write BACKING/rebuilt: the tree the disk holds. With
        ``keep_names`` every pending create, rename and unlink reached the disk and only file
        data is lost (a file system that journals metadata but not data: XFS's empty files)."""
        self.cut = True
        torn = self._tear() if tear else 0
        if keep_names:
            for dirpath, _, _ in os.walk(self.live):
                self.dir_fsynced(self.node_at(dirpath), dirpath, counted=False)
        paths = {}
        for dirpath, dirnames, filenames in os.walk(self.live):
            for name in dirnames + filenames:
                paths[os.lstat(os.path.join(dirpath, name)).st_ino] = os.path.join(dirpath, name)
        shutil.rmtree(self.rebuilt, ignore_errors=True)
        files = self._rebuild(self.root, self.rebuilt, paths)
        pending = sum(1 for n in self.nodes.values() if n.dirty or n.resized)
        return {"files": files, "pending_files": pending, "torn_bytes": torn, **self.counts}

    def _tear(self) -> int:
        """Persist a sector-aligned prefix of the last write no fsync covered."""
        if self.last_write is None:
            return 0
        node_id, offset, data = self.last_write
        node = self.nodes[node_id]
        keep = random.randrange(0, max(1, len(data) // SECTOR)) * SECTOR
        if keep == 0:
            return 0
        blob = self.durable / str(node_id)
        if not node.blob:
            if node.new:
                blob.touch()
            else:
                shutil.copyfile(self._live_path(node), blob)
            node.blob = True
        with open(blob, "r+b") as out:
            out.seek(offset)
            out.write(data[:keep])
        return keep

    def _live_path(self, node: Node) -> str:
        for dirpath, dirnames, filenames in os.walk(self.live):
            for name in dirnames + filenames:
                if os.lstat(os.path.join(dirpath, name)).st_ino == node.ino:
                    return os.path.join(dirpath, name)
        raise FileNotFoundError(f"node {node.id}")

    def _rebuild(self, directory: Node, target: Path, paths: dict[int, str]) -> int:
        target.mkdir()
        files = 0
        for name, child_id in self.entries.get(directory.id, {}).items():
            child = self.nodes[child_id]
            dest = target / name
            if child.is_dir:
                files += self._rebuild(child, dest, paths)
                continue
            if child.blob:
                shutil.copyfile(self.durable / str(child.id), dest)
            elif child.new:
                dest.touch()
            else:  # unchanged since mount (an unlinked one has a blob)
                shutil.copyfile(paths[child.ino], dest)
            files += 1
        return files


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class LazyFS(Operations):  # type: ignore[misc]
    """The pass-through operations; each one that changes anything tells LazyState."""

    def __init__(self, state: LazyState) -> None:
        self.s = state
        self.fds: dict[int, Node] = {}

    def _real(self, path: str) -> str:
        return os.path.join(self.s.live, path.lstrip("/"))

    def __call__(self, op: str, *args: Any) -> Any:
        try:
            return super().__call__(op, *args)
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from exc

    # reads
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None and fh in self.fds else os.lstat(self._real(path))
        return {key: getattr(st, key) for key in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime",
                                                   "st_nlink", "st_size", "st_uid", "st_blocks")}

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._real(path), amode):
            raise FuseOSError(errno.EACCES)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._real(path))
        return {key: getattr(sv, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                   "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    # files
    def open(self, path: str, flags: int) -> int:
        real = self._real(path)
        with self.s.lock:
            node = self.s.node_at(real)
            if flags & os.O_TRUNC:
                self.s.before_change(node, real)
                node.resized = True
            # Read-write whatever was asked (fsync reads the pending ranges back through it);
            # no O_APPEND: pwrite on such a descriptor ignores the offset the kernel chose.
            fd = os.open(real, (flags & ~(os.O_ACCMODE | os.O_APPEND)) | os.O_RDWR)
            self.fds[fd] = node
            return fd

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        real = self._real(path)
        with self.s.lock:
            if self.s.cut:
                raise FuseOSError(errno.EIO)
            existed = os.path.lexists(real)
            fd = os.open(real, os.O_RDWR | os.O_CREAT, mode)
            node = self.s.node_at(real) if existed else self.s.created(real, False)
            if existed:
                self.s.before_change(node, fd)
                os.ftruncate(fd, 0)
                node.resized = True
            self.fds[fd] = node
            return fd

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.s.lock:
            node = self.fds[fh]
            self.s.before_change(node, fh)
            written = os.pwrite(fh, data, offset)
            self.s.wrote(node, offset, data[:written])
            return written

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        with self.s.lock:
            if fh is not None and fh in self.fds:
                node = self.fds[fh]
                self.s.before_change(node, fh)
                before = os.fstat(fh).st_size
                os.ftruncate(fh, length)
            else:
                real = self._real(path)
                node = self.s.node_at(real)
                self.s.before_change(node, real)
                before = os.stat(real).st_size
                os.truncate(real, length)
            node.resized = True
            # What a shrink cut off reads as zeros if the file grows again: pending like a write.
            node.dirty.append((length, max(before, length)))

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        with self.s.lock:
            self.s.fsynced(self.fds[fh], fh)

    def flush(self, path: str, fh: int) -> None:
        return None  # close(2), not a sync

    def release(self, path: str, fh: int) -> None:
        with self.s.lock:
            self.fds.pop(fh, None)
        os.close(fh)

    # directories and names
    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        real = self._real(path)
        with self.s.lock:
            self.s.dir_fsynced(self.s.node_at(real), real)

    def mkdir(self, path: str, mode: int) -> None:
        real = self._real(path)
        with self.s.lock:
            if self.s.cut:
                raise FuseOSError(errno.EIO)
            os.mkdir(real, mode)
            self.s.created(real, True)

    def rmdir(self, path: str) -> None:
        real = self._real(path)
        with self.s.lock:
            self.s.forget(self.s.node_at(real), real)
            os.rmdir(real)

    def unlink(self, path: str) -> None:
        real = self._real(path)
        with self.s.lock:
            self.s.forget(self.s.node_at(real), real)
            os.unlink(real)

    def rename(self, old: str, new: str) -> None:
        real_old, real_new = self._real(old), self._real(new)
        with self.s.lock:
            if self.s.cut:
                raise FuseOSError(errno.EIO)
            if os.path.lexists(real_new):
                self.s.forget(self.s.node_at(real_new), real_new)
            os.rename(real_old, real_new)

    def link(self, target: str, source: str) -> None:
        """A second name for the same file (deltalake commits by link-then-unlink): durable
        once its directory is fsynced, like any name."""
        with self.s.lock:
            if self.s.cut:
                raise FuseOSError(errno.EIO)
            os.link(self._real(source), self._real(target))

    def symlink(self, target: str, source: str) -> None:
        raise FuseOSError(errno.EPERM)  # not modelled (nothing on the mount makes one)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._real(path), uid, gid)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        os.utime(self._real(path), times)


def _serve_control(state: LazyState, sock_path: Path) -> None:
    sock_path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    while True:
        conn, _ = server.accept()
        with conn:
            words = conn.recv(256).decode().split()
            with state.lock:
                if words[:1] == ["cut"]:
                    reply = state.power_cut(tear="tear" in words[1:], keep_names="keep-names" in words[1:])
                else:
                    reply = {"pending_files": sum(1 for n in state.nodes.values() if n.dirty or n.resized),
                             **state.counts}
            conn.sendall(json.dumps(reply).encode())


def send_control(backing: Path, command: str) -> dict[str, Any]:
    """Send ``command`` (``cut``, ``cut tear``, ``cut keep-names``, ``stats``) to the daemon
    serving ``backing``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(120)
        conn.connect(str(backing / "control.sock"))
        conn.sendall(command.encode())
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    reply: dict[str, Any] = json.loads(b"".join(chunks))
    return reply


def _after_power_cut(backing: Path) -> None:
    """What the disk held replaces the live tree (the previous daemon's cut, if any)."""
    rebuilt = backing / "rebuilt"
    if rebuilt.is_dir():
        shutil.rmtree(backing / "live", ignore_errors=True)
        rebuilt.rename(backing / "live")
    shutil.rmtree(backing / "durable", ignore_errors=True)


def main() -> None:
    backing, mountpoint = Path(sys.argv[1]).absolute(), Path(sys.argv[2]).absolute()
    _after_power_cut(backing)
    (backing / "live").mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    state = LazyState(backing)
    threading.Thread(target=_serve_control, args=(state, backing / "control.sock"), daemon=True).start()
    # big_writes: 128 KiB WRITE calls instead of 4 KiB ones; no attribute caching, so a size
    # changed through another descriptor is seen at once.
    FUSE(LazyFS(state), str(mountpoint), foreground=True, nothreads=False, big_writes=True,
         max_write=131072, attr_timeout=0, entry_timeout=0, fsname="lazyfs")
    _after_power_cut(backing)


if __name__ == "__main__":
    main()
