"""Every file a SYNC_FLUSH store creates or renames into place is followed by an fsync of its
directory (the issue's strace finding: 4 of 4 CommitLog files and 5 of 5 config files were
not). Read from strace of a real store, not from a hook: what counts is the system calls."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (scripts/test.sh installs it)")

_REPO = Path(__file__).resolve().parents[2]
# strace -f -o prints PID first, and -y each descriptor with its path: 7 fsync(7</tmp/x>) = 0;
# a call another thread interrupts comes in two lines: "<unfinished ...>", "<... fsync resumed>".
_CALL = re.compile(r'^(\w+)\((.*)\)\s+=\s+(-?\d+)')
_RESUMED = re.compile(r'^<\.\.\. \w+ resumed>(.*)$')
_PATH_ARG = re.compile(r'"([^"]*)"')
_FD_PATH = re.compile(r'^-?\d+<([^>]*)>')


def _trace(tmp_path: Path, *child_args: str) -> list[tuple[str, str, int]]:
    out = tmp_path / "strace.out"
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": f"{_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        ["strace", "-f", "-y", "-qq", "-s", "256", "-o", str(out),
         "-e", "trace=openat,mkdir,mkdirat,rename,renameat,renameat2,fsync,fdatasync,msync",
         sys.executable, "-m", "tests.powercut.fsync_child", str(store), *child_args],
        env=env, cwd=_REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
    calls = []
    unfinished: dict[str, str] = {}  # pid -> the first half of a call another thread interrupted
    for line in out.read_text().splitlines():
        pid, _, rest = line.partition(" ")
        if rest.endswith("<unfinished ...>"):
            unfinished[pid] = rest.removesuffix("<unfinished ...>")
            continue
        resumed = _RESUMED.match(rest.lstrip())
        if resumed:
            rest = unfinished.pop(pid, "") + resumed.group(1)
        m = _CALL.match(rest.lstrip())
        if m:
            calls.append((m.group(1), m.group(2), int(m.group(3))))
    return calls


def test_every_name_made_in_the_store_is_followed_by_a_directory_fsync(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    pending: dict[str, set[str]] = {}  # directory -> names made in it since its last fsync
    made: list[str] = []
    for call, args, result in _trace(tmp_path):
        if result < 0:
            continue
        if call == "openat" and "O_CREAT" in args:
            path = _PATH_ARG.search(args)
            if path and path.group(1).startswith(store) and not path.group(1).endswith(".tmp"):
                name = path.group(1)
                pending.setdefault(os.path.dirname(name), set()).add(name)
                made.append(name)
        elif call.startswith("rename"):
            paths = _PATH_ARG.findall(args)
            if paths and paths[-1].startswith(store):
                pending.setdefault(os.path.dirname(paths[-1]), set()).add(paths[-1])
                made.append(paths[-1])
        elif call == "fsync":
            fd = _FD_PATH.match(args)
            if fd:
                pending.pop(fd.group(1), None)
    rolled = [p for p in made if "/commitlog/" in p]
    config = [p for p in made if "/config/" in p]
    assert len(set(rolled)) >= 4, f"the store rolled too few CommitLog files to tell: {sorted(set(rolled))}"
    assert len(set(config)) >= 4, sorted(set(config))
    assert any("/consumequeue/" in p for p in made)
    never_synced = sorted(name for names in pending.values() for name in names)
    assert never_synced == [], f"created or renamed, their directory never fsynced after: {never_synced}"


def test_lake_files_are_durable_with_their_new_directories(tmp_path: Path) -> None:
    """LakeLocation.make_durable, which compact calls before a Delta commit names the files:
    each file fsynced, and each directory it created fsynced in its parent."""
    lake = str(tmp_path / "store" / "lake")
    synced: set[str] = set()
    made: list[str] = []
    for call, args, result in _trace(tmp_path, "lake"):
        if result < 0:
            continue
        path = _PATH_ARG.search(args)
        creates = call.startswith("mkdir") or (call == "openat" and "O_CREAT" in args)
        if creates and path and path.group(1).startswith(lake):
            made.append(path.group(1))
        elif call == "fsync":
            fd = _FD_PATH.match(args)
            if fd:
                synced.add(fd.group(1))
    assert len([p for p in made if p.endswith(".parquet")]) == 2
    assert any(p.endswith("store_date=2026-11-28") for p in made), made
    missing = sorted({p for p in made if p not in synced} | {os.path.dirname(p) for p in made} - synced)
    assert missing == [], f"not fsynced: {missing}"
