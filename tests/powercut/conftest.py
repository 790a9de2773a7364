"""The lazyfs mount the power-cut tests put their files on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powercut.mount import LazyMount


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    mount = LazyMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "lazyfs.log")
    mount.mount()
    try:
        yield mount
    finally:
        mount.unmount()
