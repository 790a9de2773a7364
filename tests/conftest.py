"""Suite-wide hooks: ``async def`` tests run on a fresh event loop (no pytest-asyncio needed),
and every test that takes a fixture starting Spark carries the ``spark`` marker. Other tests
that run Spark in a child process (``lakemq tier run`` and the other lake jobs) carry it in
their module's ``pytestmark``. README.md says how to run everything but Spark and slow tests."""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames  # noqa: SLF001 - the same lookup pytest's own call uses
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True


# spark: a SparkSession (tests/lake); console: a cluster tiered into a lake by `lakemq tier run`.
_SPARK_FIXTURES = frozenset({"spark", "console"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
