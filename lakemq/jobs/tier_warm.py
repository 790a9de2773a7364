"""The warm-up of ``lakemq tier serve``: one whole tier pass over a scratch store and lake,
before the process says it is ready.

A Spark session's first pass with data pays costs no later pass pays: the Python worker
daemon and its first workers (each importing the CommitLog decoder, pyarrow's Parquet writer
and the Delta statistics), the JVM's first ``mapInArrow`` plan and Arrow transfer, the first
Delta commits of the session. Measured on a loaded machine that first pass took 65-91 s where
later ones took 7-10 s, and every message stored meanwhile waited for it (BENCHMARKS.md, "Lake
lag"). So ``tier serve`` runs :func:`lakemq.jobs.tier_run.tier_run` itself once at start over
a scratch store holding one small record per Spark core (one write task each, so every
worker slot starts) into a scratch lake: seal, Spark write, commit, verify, manifest. Both
live in a temporary local directory, deleted after: like the store, it must be readable by
the executors, which holds for the local masters ``tier serve`` runs on. Fault injection's
crash points do not fire in it: a fault test kills a real pass.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakemq.common.faults import crash_points_off
from lakemq.common.message import properties_to_string
from lakemq.common.record import encode_host, encode_record
from lakemq.errors import LakeError
from lakemq.jobs.tier_run import tier_run
from lakemq.tiering.config import TieringConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WarmUp", "warm_up"]

_BROKER = "lakemq-warm-up"
_TOPIC = b"lakemq_warm_up"
_BODY = b"w" * 256


@dataclass(frozen=True, slots=True)
class WarmUp:
    rows: int  # rows the scratch pass wrote and committed
    tasks: int  # Spark write tasks it ran
    seconds: float


def _scratch_store(store: Path, records: int) -> int:
    """A CommitLog file of ``records`` equal records, as a broker writes them; returns the size
    of one record."""
    (store / "commitlog").mkdir(parents=True)
    now = int(time.time() * 1000)
    buf = bytearray()
    size = 0
    for i in range(records):
        props = properties_to_string({"KEYS": f"warm-{i}", "UNIQ_KEY": f"{i:032X}", "TAGS": "warm"}).encode()
        record = encode_record(
            topic=_TOPIC, queue_id=i, body=_BODY, flag=0, properties=props, sys_flag=0, born_timestamp=now,
            born_host=encode_host("127.0.0.1:1"), store_host=encode_host("127.0.0.1:2"), queue_offset=0,
            physical_offset=len(buf), store_timestamp=now,
        )
        size = len(record)
        buf += record
    path = store / "commitlog" / f"{0:020d}"
    path.write_bytes(bytes(buf))
    os.utime(path, (now / 1000 - 3600, now / 1000 - 3600))  # idle: the pass seals it to its last record
    return size


def warm_up(spark: SparkSession) -> WarmUp:
    """One tier pass over a scratch store and lake (deleted after); raises LakeError if it did
    not write and commit every scratch record, which a real pass would not do either."""
    began = time.monotonic()
    slots = max(1, spark.sparkContext.defaultParallelism)
    scratch = Path(tempfile.mkdtemp(prefix="lakemq-tier-warm-up-"))
    try:
        store = scratch / "store"
        record_size = _scratch_store(store, slots)
        # A boundary at every record: the write is cut into one task per slot.
        config = TieringConfig(lake_uri=str(scratch / "lake"), tier_seal_idle_ms=1, tier_boundary_stride=record_size)
        with crash_points_off():  # a fault test's crash is meant for a real pass
            result = tier_run(spark, store_dir=store, broker_name=_BROKER, config=config, upkeep=False,
                              flushed=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.compact.rows != slots or result.verified != 1:
        raise LakeError(f"the warm-up pass committed {result.compact.rows} of {slots} scratch rows and verified "
                        f"{result.verified} of 1 range")
    return WarmUp(result.compact.rows, slots, time.monotonic() - began)
