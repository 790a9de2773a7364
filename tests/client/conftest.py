"""Client integration fixture: one real name server + broker per test module (``async def``
tests run through the suite-wide hook in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, start_cluster

# The broker lets a group with no committed offset start at 0 while a queue's first message is
# still in page cache (RocketMQ's young-queue rule); ratio 0 turns that off, so
# CONSUME_FROM_LAST_OFFSET / TIMESTAMP mean what they say even on a fresh topic.
BROKER_CONF = {"accessMessageInMemoryMaxRatio": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster"), brokers=["broker-a"], broker_conf=BROKER_CONF) as c:
        yield c
