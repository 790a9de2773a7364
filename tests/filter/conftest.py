"""One real name server + broker (default config: property filters on, ACL off) per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster"), brokers=["broker-a"],
                       broker_conf={"accessMessageInMemoryMaxRatio": "0"}) as c:
        yield c
