"""Whether the store's device makes an append wait for writeback (stable pages), read from
sysfs: a fake /sys laid out as the kernel lays it out for the test directory's own device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakemq.store.device import appends_may_wait_for_writeback


def _fake_sys(root: Path, path: Path, stable_writes: str | None, partition: bool) -> Path:
    """``root``/dev/block/MAJ:MIN for ``path``'s device, a symlink into a devices tree as the
    kernel's is: a partition's directory inside its disk's, the queue beside the disk."""
    device = os.stat(path).st_dev
    disk = root / "devices" / "virtual" / "block" / "vdz"
    node = disk / "vdz1" if partition else disk
    node.mkdir(parents=True)
    if partition:
        (node / "partition").write_text("1\n")
    if stable_writes is not None:
        (disk / "queue").mkdir()
        (disk / "queue" / "stable_writes").write_text(stable_writes + "\n")
    links = root / "dev" / "block"
    links.mkdir(parents=True)
    (links / f"{os.major(device)}:{os.minor(device)}").symlink_to(node)
    return root


def _on_a_block_device(path: Path) -> None:
    if os.major(os.stat(path).st_dev) == 0:
        pytest.skip("the test directory is on no block device of its own (tmpfs, overlayfs): "
                    "its answer is always True, tested below")


@pytest.mark.parametrize("partition", [False, True])
@pytest.mark.parametrize(("stable_writes", "waits"), [("0", False), ("1", True)])
def test_the_device_queue_decides(tmp_path: Path, partition: bool, stable_writes: str, waits: bool) -> None:
    store = tmp_path / "store"
    store.mkdir()
    _on_a_block_device(store)
    sys_root = _fake_sys(tmp_path / "sys", store, stable_writes, partition)
    assert appends_may_wait_for_writeback(store, sys_root) is waits
    # A CommitLog directory not made yet: its nearest existing parent's device.
    assert appends_may_wait_for_writeback(store / "commitlog" / "later", sys_root) is waits


def test_unknown_means_it_may_wait(tmp_path: Path) -> None:
    _on_a_block_device(tmp_path)
    assert appends_may_wait_for_writeback(tmp_path, tmp_path / "no-sys") is True  # no sysfs entry
    sys_root = _fake_sys(tmp_path / "sys", tmp_path, None, partition=False)
    assert appends_may_wait_for_writeback(tmp_path, sys_root) is True  # a kernel without stable_writes


def test_a_device_without_a_block_device_may_wait() -> None:
    proc = Path("/proc")  # procfs: device major 0, as btrfs, overlayfs and NFS mounts are
    assert os.major(os.stat(proc).st_dev) == 0
    assert appends_may_wait_for_writeback(proc) is True


def test_the_fault_hook_forces_stable_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    store.mkdir()
    _on_a_block_device(store)
    sys_root = _fake_sys(tmp_path / "sys", store, "0", partition=False)
    assert appends_may_wait_for_writeback(store, sys_root) is False
    monkeypatch.setenv("LAKEMQ_FAULT_STABLE_WRITES", "1")
    assert appends_may_wait_for_writeback(store, sys_root) is True
