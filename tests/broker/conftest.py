from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.remoting import SyncRemotingClient
from tests.cluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One NameServer and broker-a shared by a module's tests (use distinct topics)."""
    with start_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of the test's own, for tests that restart or disturb the broker."""
    with start_cluster(tmp_path) as running:
        yield running


@pytest.fixture
def client() -> Iterator[SyncRemotingClient]:
    with SyncRemotingClient() as sync_client:
        yield sync_client
