"""Fixtures for the lake tests: one SparkSession for the whole test session (local[2], no UI)
and a store directory written through the real CommitLog (lakemq.store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lake_helpers import WriteStore, store_writer


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from lakemq.jobs.session import build_session

    session = build_session(master="local[2]", app_name="lakemq-tests", ui_enabled=False,
                            conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"})
    yield session
    session.stop()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def write_store(store_dir: Path) -> WriteStore:
    return store_writer(store_dir)
