from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig


@pytest.fixture
def open_commit_log(tmp_path: Path) -> Iterator[Callable[..., CommitLog]]:
    opened: list[CommitLog] = []

    def _open(**config: object) -> CommitLog:
        config.setdefault("store_path_root_dir", str(tmp_path / "store"))
        config.setdefault("mapped_file_size_commit_log", 64 * 1024)
        config.setdefault("max_message_size", 16 * 1024)
        cl = CommitLog(StoreConfig(**config), store_host="10.1.2.3:10911")  # type: ignore[arg-type]
        cl.load()
        opened.append(cl)
        return cl

    yield _open
    for cl in opened:
        if cl._running:
            cl.shutdown()
