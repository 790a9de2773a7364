"""Client integration fixtures: one real name server + broker per test module, and ``async
def`` tests run on a fresh event loop (the project has no pytest-asyncio)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, start_cluster

# The broker lets a group with no committed offset start at 0 while a queue's first message is
# still in page cache (RocketMQ's young-queue rule); ratio 0 turns that off, so
# CONSUME_FROM_LAST_OFFSET / TIMESTAMP mean what they say even on a fresh topic.
BROKER_CONF = {"accessMessageInMemoryMaxRatio": "0"}


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames  # noqa: SLF001 - the lookup pytest's own call uses
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster"), brokers=["broker-a"], broker_conf=BROKER_CONF) as c:
        yield c
