"""A lazyfs mount the power-cut tests drive: mount, cut the power, mount again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.powercut.lazyfs import send_control

__all__ = ["LazyMount", "fuse_available"]

_REPO = Path(__file__).resolve().parents[2]


def fuse_available() -> str | None:
    """Why lazyfs cannot run here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None:
        return "no fusermount (Debian's fuse package)"
    try:
        import fuse  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"fusepy or libfuse2 missing: {exc}"
    return None


class LazyMount:
    """``mountpoint`` served by a lazyfs daemon over ``backing``."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path) -> None:
        self.backing, self.mountpoint, self.log = backing, mountpoint, log
        self._proc: subprocess.Popen[bytes] | None = None

    def mount(self) -> None:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": f"{_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        with open(self.log, "ab") as out:
            self._proc = subprocess.Popen([sys.executable, "-m", "tests.powercut.lazyfs", str(self.backing),
                                           str(self.mountpoint)], stdout=out, stderr=subprocess.STDOUT,
                                          env=env, cwd=_REPO)
        deadline = time.monotonic() + 30
        while not (os.path.ismount(self.mountpoint) and (self.backing / "control.sock").exists()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lazyfs did not mount {self.mountpoint}; see {self.log}")
            time.sleep(0.05)

    def power_cut(self, *, tear: bool = False, keep_names: bool = False) -> dict[str, Any]:
        """Drop everything no fsync made durable (with ``keep_names``: only file data), then
        unmount; the processes using the mount must have been killed first. Returns the
        daemon's counts."""
        reply = send_control(self.backing, " ".join(["cut", *(["tear"] if tear else []),
                                                     *(["keep-names"] if keep_names else [])]))
        self.unmount()
        return reply

    def unmount(self) -> None:
        if self._proc is None:
            return
        subprocess.run(["fusermount", "-u", "-z", str(self.mountpoint)], check=False,
                       capture_output=True)
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        (self.backing / "control.sock").unlink(missing_ok=True)
