"""``lakemq tier serve``: tiering as a long-running loop over one warm Spark session.

Passes of :func:`lakemq.jobs.tier_run.tier_run` with ``flushed``: whatever whole records the
broker has flushed (its checkpoint says how far, see
:func:`lakemq.store.checkpoint.read_flushed_offset`) are sealed, committed once (the Delta app
transaction's version is the range end, as for sealed files), verified and, as the broker's
rules allow, retained. ``tierIntervalMs`` is the lake lag the passes aim for: each begins early
enough that what was flushed just after the previous pass's cut is committed within it
(:class:`lakemq.tiering.pass_schedule.PassSchedule`). The small files this makes are merged by the table upkeep
(:func:`lakemq.jobs.maintain.maintain`), run at most every ``tierMaintainIntervalMs`` rather
than every pass, so a Parquet file is not rewritten every minute as its partition grows.

With the lake service on the same session, a client's query and a pass share its cores: the
passes' jobs run in a Spark scheduler pool of their own (:data:`TIER_POOL`), ``lakemq tier
serve`` sets ``spark.scheduler.mode`` FAIR, so a query's tasks take the next free slot instead
of queueing behind every task of the pass's stage (Spark's default FIFO), and on a local master
it keeps a slot the passes do not plan for (:func:`lakemq.jobs.lake_service.query_slot`).

A pass that dies (the process killed) leaves what ``tier run`` leaves: the next pass, or the
next process, finishes it without committing anything twice. ``stop`` (SIGTERM in the CLI)
ends the loop after the pass under way.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakemq.jobs.tier_run import TierRunResult, tier_run
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.pass_schedule import PassSchedule
from lakemq.tiering.retention import RetentionRules

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["TIER_POOL", "ServePass", "tier_serve"]

TIER_POOL = "tier"


@dataclass(frozen=True, slots=True)
class ServePass:
    number: int  # 1 for the first pass
    result: TierRunResult
    seconds: float
    maintained: bool


def tier_serve(
    spark: SparkSession, *, store_dir: str | Path, broker_name: str, config: TieringConfig, stop: threading.Event,
    storage_options: Mapping[str, str] | None = None, retention: RetentionRules | None = None,
    on_pass: Callable[[ServePass], None] | None = None, max_passes: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run passes, keeping the lake within ``config.tier_interval_ms`` of the flushed log, until
    ``stop`` is set (or ``max_passes`` ran); returns the number of passes. An error of a pass
    ends the loop by propagating."""
    schedule = PassSchedule(config.tier_interval_ms / 1000)
    maintain_s = config.tier_maintain_interval_ms / 1000
    last_maintain: float | None = None
    passes = 0
    while not stop.is_set() and (max_passes is None or passes < max_passes):
        began = clock()
        upkeep = last_maintain is None or began - last_maintain >= maintain_s
        with _in_pool(spark, TIER_POOL):
            result = tier_run(spark, store_dir=store_dir, broker_name=broker_name, config=config,
                              storage_options=storage_options, retention=retention, upkeep=upkeep, flushed=True)
        if upkeep:
            last_maintain = began
        passes += 1
        seconds = clock() - began
        if on_pass is not None:
            on_pass(ServePass(passes, result, seconds, upkeep))
        if max_passes is not None and passes >= max_passes:
            break
        stop.wait(schedule.wait_after(seconds))
    return passes


@contextlib.contextmanager
def _in_pool(spark: SparkSession, pool: str) -> Iterator[None]:
    """The jobs this thread submits go to ``pool``; cleared after, so a thread started later
    (Spark Connect's) does not inherit it."""
    context = spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", pool)
    try:
        yield
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]  # None clears it
