"""Suite-wide hooks: ``async def`` tests run on a fresh event loop (no pytest-asyncio needed),
every test that takes a fixture starting Spark carries the ``spark`` marker (other tests that
run Spark in a child process, ``lakemq tier run`` and the other lake jobs, carry it in their
module's ``pytestmark``), and every Spark driver the suite starts, in this process or a child,
starts with the test settings below. README.md says how to run everything but Spark and slow
tests."""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames  # the same look-up pytest's own call uses
    asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True


# spark: a SparkSession; console: a cluster tiered into a lake by `lakemq tier run`.
_SPARK_FIXTURES = frozenset({"spark", "console"})


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession (local[2], no UI) for a worker's whole session: the lake jobs, and the
    lake commands run in-process (tests/cli_in_process.py)."""
    from lakemq.jobs.session import build_session

    session = build_session(master="local[2]", app_name="lakemq-tests", ui_enabled=False,
                            conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"})
    yield session
    session.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark Spark tests, then run the modules holding slow tests first and Spark ones next.
    scripts/test.sh hands whole modules to its two workers in this order
    (``--no-loadscope-reorder``): the longest ones start early and a worker ends on short
    ones, not on a two-minute module while the other idles."""
    for item in items:
        if _SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)
    rank: dict[Path, int] = {}
    for item in items:
        own = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("spark") else 2
        rank[item.path] = min(own, rank.get(item.path, own))
    items.sort(key=lambda item: rank[item.path])  # stable: each module's tests stay in order


_ROOT = Path(__file__).resolve().parents[1]
# The suite's Spark jobs read kilobytes and each starts a driver JVM, two at a time on two
# cores. C1 alone compiles far less than C2 in a JVM that lives a minute, and the serial
# collector needs no GC threads. Delta's snapshot state is rebuilt in 50 shuffle partitions
# by default: 50 tasks for a log of a few commits. No test reads a job's web UI. Generated
# code pays for itself over millions of rows; over the tests' few hundred, compiling it
# (Janino, then the JVM) is most of a query's time: Spark's interpreted evaluation, which
# gives the same results, made the Spark files 17% faster (tests/lake/test_transaction_sweep.py
# and test_compact.py: 115 s -> 95 s). Adaptive execution re-plans each query after every
# shuffle stage, which pays off on skewed gigabytes; on the tests' kilobytes it is only the
# re-planning (test_transaction_sweep_states.py and test_compact.py: 74 s and 77 s -> 54 s
# and 55 s without it).
_TEST_SPARK_DEFAULTS = """
spark.driver.defaultJavaOptions -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
spark.ui.enabled false
spark.sql.codegen.wholeStage false
spark.sql.codegen.factoryMode NO_CODEGEN
spark.sql.adaptive.enabled false
"""


def pytest_configure() -> None:
    """Point LAKEMQ_SPARK_DEFAULTS (inherited by every child process) at the project's
    conf/spark-defaults.conf plus the test settings, and LAKEMQ_LOG_DIR at build/tests/logs
    (the suite's processes log there, not in the user's ~/logs/lakemq); a value already set
    is kept."""
    os.environ.setdefault("LAKEMQ_LOG_DIR", str(_ROOT / "build" / "tests" / "logs"))
    if os.environ.get("LAKEMQ_SPARK_DEFAULTS"):
        return
    conf = _ROOT / "build" / "tests" / "spark-defaults.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    text = (_ROOT / "conf" / "spark-defaults.conf").read_text(encoding="utf-8") + _TEST_SPARK_DEFAULTS
    # xdist's workers write the same text at once: each renames its own copy into place.
    tmp = conf.with_name(f"{conf.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, conf)
    os.environ["LAKEMQ_SPARK_DEFAULTS"] = str(conf)


# Each xdist worker's share of the run, shown at the end (scripts/test.sh): the tests it ran,
# the seconds they took, and when its last one ended. Two workers that end far apart mean the
# module order (pytest_collection_modifyitems) leaves one idle at the end.
_busy = {"tests": 0, "seconds": 0.0, "last_end": 0.0}
_workers: dict[str, dict[str, Any]] = {}
_began = time.time()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _busy["seconds"] += report.duration
    if report.when == "teardown":
        _busy["tests"] += 1
        _busy["last_end"] = time.time()


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: its figures go back to the controller
        output["lakemq_busy"] = dict(_busy)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    busy = getattr(node, "workeroutput", {}).get("lakemq_busy")
    if busy is not None:
        _workers[node.workerinput["workerid"]] = busy


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for worker, busy in sorted(_workers.items()):
        terminalreporter.write_line(
            f"{worker}: {busy['tests']} tests in {busy['seconds']:.0f} s; its last test ended "
            f"{busy['last_end'] - _began:.0f} s after the start")
