"""A smoke run of bench/lake_bench.py's SQL part on a small lake: the queries through Delta and
pyarrow agree before and after the upkeep every ``lakemq tier run`` ends with, and that upkeep
keeps every row (not timed: the figures are BENCHMARKS.md's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.lake_bench import (
    DELTA_ENGINE,
    PYARROW_ENGINE,
    SQL_QUERIES,
    bench_compact,
    bench_maintain,
    bench_sql,
    write_small_commitlog,
)

MESSAGES = 20_000


def _count(spark: Any, lake: Path) -> int:
    return int(spark.read.format("delta").load(str(lake / "messages")).count())


def test_sql_runs_on_the_compacted_and_the_maintained_lake(spark: Any, tmp_path: Path) -> None:
    store, lake = tmp_path / "store", tmp_path / "lake"
    write_small_commitlog(store, MESSAGES, progress=False)
    assert bench_compact(spark, store, lake).rows == MESSAGES

    # bench_sql raises when the engines' answers differ.
    before = bench_sql(spark, lake, MESSAGES, tmp_path, old=False)
    upkeep = bench_maintain(lake)
    after = bench_sql(spark, lake, MESSAGES, tmp_path, old=False)

    for times in (before, after):
        assert set(times) == set(SQL_QUERIES)
        for engines in times.values():
            assert set(engines) == {DELTA_ENGINE, PYARROW_ENGINE}
            assert all(len(runs) == 3 and all(t > 0 for t in runs) for runs in engines.values())
    assert 0 < upkeep.files_after <= upkeep.files_before
    assert _count(spark, lake) == MESSAGES
