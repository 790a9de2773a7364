"""A NameServer and one broker per test module, for the semantics tests that need nothing
special from the broker (modules with their own broker conf define their own ``cluster``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running
