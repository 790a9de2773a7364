"""Compatibility fixtures: one real NameServer + broker per module, and the C++ client driver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster, start_cluster
from tests.compat.cpp_client import CppClient


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture
def cpp(cluster: Cluster, tmp_path: Path) -> CppClient:
    return CppClient(cluster.namesrv_addr, tmp_path / "cpp")
