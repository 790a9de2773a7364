"""Fixtures for the lake tests: a store directory written through the real CommitLog
(lakemq.store). The SparkSession (``spark``) is tests/conftest.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from lake_helpers import WriteStore, store_writer


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def write_store(store_dir: Path) -> WriteStore:
    return store_writer(store_dir)
