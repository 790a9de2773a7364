"""Suite-wide hooks: ``async def`` tests run on a fresh event loop (no pytest-asyncio needed),
every test that takes a fixture starting Spark carries the ``spark`` marker (other tests that
run Spark in a child process, ``lakemq tier run`` and the other lake jobs, carry it in their
module's ``pytestmark``), and under pytest-xdist every file with a Spark test runs on one
worker. README.md says how to run everything but Spark and slow tests."""

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


# Before xdist's own hook, which reads the groups (--dist loadgroup).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    spark_files = set()
    for item in items:
        if _SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark"):
            spark_files.add(item.path)
    # A file stays on one worker (its module-scoped cluster starts once). Files with Spark
    # share one worker: each Spark driver JVM takes a core and a GiB while it plans, and on
    # two cores several at once pushed jobs past their timeouts.
    for item in items:
        group = "spark" if item.path in spark_files else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))
