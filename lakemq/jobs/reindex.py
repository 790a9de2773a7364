"""reindex: rebuild a store's ConsumeQueue and IndexFile files from its CommitLog.

For a lost or corrupted index. The result is what the broker's dispatch (reput) service
builds from the same CommitLog, byte for byte, because the same code builds it:

1. refuse a store a process has open (a running broker maps its files) or that a broker left
   without a clean shutdown (the ``abort`` file; ``force`` overrides that one);
2. plan byte ranges over every CommitLog file (:func:`~lakemq.jobs.reindex_source.plan_ranges`);
3. Spark decodes the ranges in parallel through the ``commitlog_dispatch`` source, a wave of
   ranges per job, so the driver holds one wave's rows at a time;
4. the driver hands each record, in CommitLog order, as a ``DispatchRequest`` to the store's
   own dispatchers, :class:`~lakemq.store.consume_queue_store.ConsumeQueueStore` and
   :class:`~lakemq.store.index_service.IndexService` (which leave out prepared and rollback
   records, skip blank ones, index ``topic#UNIQ_KEY`` and ``topic#KEY``), writing into
   staging directories next to the live ones;
5. the staging directories replace ``consumequeue/`` (or one topic's directory) and
   ``index/``, and the checkpoint's timestamps are set to what the rebuilt files hold.

IndexFile names are the one thing the CommitLog cannot reproduce: the broker names a file by
the wall clock when it creates it. The rebuild keeps the names of the files ``index/`` still
holds, in order, and names any further file by the store time of the record that opened it
(what the wall clock read, give or take the dispatch delay). See docs/REINDEX.md.

The CommitLog is only ever read. A corrupt range stops the rebuild and changes nothing
unless ``skip_corrupt``, which steps over it (reported) as the lake jobs do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakemq.common.config import bind, read_properties
from lakemq.errors import ConfigError, CorruptSegmentError, StoreError
from lakemq.jobs.reindex_source import DispatchDataSource, DispatchRange, RangePlan, plan_ranges
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.config import StoreConfig, store_root
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.dispatch import CommitLogDispatcher, dispatch_to
from lakemq.store.index_service import IndexService

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ReindexResult", "ReindexSettings", "check_store_idle", "holders_of", "reindex", "run_reindex"]

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (step, done, total)

STAGING = ".reindex"
OLD = ".reindex-old"


@dataclass(frozen=True, slots=True)
class ReindexResult:
    records: int  # CommitLog records dispatched
    bytes: int  # CommitLog bytes read
    queues: int  # ConsumeQueues written
    kept_queues: tuple[str, ...]  # "topic/queueId" with no record left in the CommitLog: kept as they were
    index_files: tuple[str, ...]
    corrupt: tuple[tuple[int, int], ...]  # CommitLog bytes stepped over (skip_corrupt)
    dispatched_end: int  # CommitLog offset after the last record dispatched
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {"records": self.records, "bytes": self.bytes, "queues": self.queues,
                "kept_queues": list(self.kept_queues),
                "index_files": list(self.index_files), "corrupt": [list(c) for c in self.corrupt],
                "dispatched_end": self.dispatched_end, "seconds": round(self.seconds, 3)}


# -- is anyone using the store? ----------------------------------------------------------------

def holders_of(store_dir: Path) -> list[int]:
    """Processes (other than this one) with a file under ``store_dir`` mapped or open: a broker
    maps its CommitLog, ConsumeQueue and index files and the checkpoint."""
    root = str(store_dir.resolve()) + os.sep
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/maps", encoding="utf-8", errors="replace") as maps:
                if any(root in line for line in maps):
                    found.append(int(entry.name))
                    continue
            fds = f"/proc/{entry.name}/fd"
            if any(os.readlink(os.path.join(fds, fd)).startswith(root) for fd in os.listdir(fds)):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's process
            continue
    return sorted(found)


def check_store_idle(store_dir: Path, *, force: bool = False) -> None:
    """Raise StoreError unless ``store_dir`` is a store no broker is using."""
    if not (store_dir / "commitlog").is_dir():
        raise StoreError(f"{store_dir} is not a broker store (no commitlog/ directory)")
    pids = holders_of(store_dir)
    if pids:
        raise StoreError(f"store {store_dir} is in use by process {', '.join(map(str, pids))} "
                         "(a running broker?): stop it first")
    if (store_dir / "abort").exists() and not force:
        raise StoreError(f"store {store_dir} was not shut down cleanly (abort file present): start and stop "
                         "its broker once, or pass force if no broker uses it")


# -- settings ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReindexSettings:
    config: StoreConfig
    topic: str | None = None
    consume_queue: bool = True
    index: bool = True
    skip_corrupt: bool = False
    force: bool = False
    stride: int = 64 << 20
    master: str | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ReindexSettings:
        """What a scheduler passes: ``store_dir``, ``broker_conf``, ``conf`` (camelCase
        overrides), ``topic``, ``consume_queue``, ``index``, ``skip_corrupt``, ``force``,
        ``master``; unknown keys are refused."""
        known = {"store_dir", "broker_conf", "conf", "topic", "consume_queue", "index", "skip_corrupt", "force",
                 "master", "stride"}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown reindex setting(s): {', '.join(sorted(unknown))}")
        props = dict(read_properties(values["broker_conf"])) if values.get("broker_conf") else {}
        props.update({str(k): str(v) for k, v in (values.get("conf") or {}).items()})
        # The store as the broker finds it: --data-dir, else storePathRootDir, else ~/lakemq-data.
        config = bind(StoreConfig, props, store_path_root_dir=str(store_root(props, values.get("store_dir") or None)))
        return cls(config=config, topic=values.get("topic") or None,
                   consume_queue=_bool(values.get("consume_queue", True)), index=_bool(values.get("index", True)),
                   skip_corrupt=_bool(values.get("skip_corrupt", False)), force=_bool(values.get("force", False)),
                   stride=int(values.get("stride") or 64 << 20), master=values.get("master") or None)


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")


# -- the rebuild -------------------------------------------------------------------------------

class _StoreClock:
    """The IndexService's clock during a rebuild: the store time of the record in hand."""

    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def _waves(ranges: list[DispatchRange], per_wave: int) -> Iterator[list[DispatchRange]]:
    for i in range(0, len(ranges), per_wave):
        yield ranges[i : i + per_wave]


def _read_wave(spark: SparkSession, wave: list[DispatchRange], delay_spec: str, topic: str | None,
               queues: bool) -> pa.Table:
    from pyspark.sql import functions as F

    df = (spark.read.format(DispatchDataSource.name())
          .option("ranges", json.dumps([[r.path, r.file_start, r.start, r.end] for r in wave]))
          .option("delay_levels", delay_spec).load())
    if topic is not None and queues:
        df = df.where(F.col("bad") | (F.col("topic") == topic))
    elif not queues:
        df = df.where(F.col("bad") | F.col("keys").isNotNull() | F.col("uniq_key").isNotNull())
    return df.toArrow().sort_by("commitlog_offset")


def _old_index_names(index_dir: Path) -> list[str]:
    if not index_dir.is_dir():
        return []
    return sorted(p.name for p in index_dir.iterdir() if p.is_file() and p.name.isdigit())


def _swap(staged: Path, live: Path) -> None:
    """Put ``staged`` where ``live`` is; the old one is renamed aside first and removed last,
    so an interrupted swap leaves one of the two whole."""
    old = live.with_name(live.name + OLD)
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        live.rename(old)
    if staged.exists():
        staged.rename(live)
    shutil.rmtree(old, ignore_errors=True)


def _carry_over(staged: Path, live: Path, topic: str | None) -> tuple[str, ...]:
    """Move into ``staged`` the queue directories of ``live`` the rebuild did not produce: a
    queue whose every record expired from the CommitLog has nothing to be rebuilt from, and
    dropping it would restart its queue offsets at 0."""
    kept = []
    if not live.is_dir():
        return ()
    for topic_dir in sorted(p for p in live.iterdir() if p.is_dir() and not p.is_symlink()
                            and topic in (None, p.name)):
        for queue_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir() and not p.is_symlink()):
            target = staged / topic_dir.name / queue_dir.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                queue_dir.rename(target)
                kept.append(f"{topic_dir.name}/{queue_dir.name}")
    return tuple(kept)


def _clean_leftovers(root: Path) -> None:
    """Staging from an interrupted run goes; an interrupted swap is finished backwards."""
    for name in ("consumequeue", "index"):
        live, old = root / name, root / (name + OLD)
        shutil.rmtree(root / (name + STAGING), ignore_errors=True)
        if old.exists() and not live.exists():
            old.rename(live)
        shutil.rmtree(old, ignore_errors=True)


def _name_index_files(index_dir: Path, keep: list[str]) -> tuple[str, ...]:
    """Give the rebuilt files the names the old ones had, in order; later files keep their
    store-time names, counted up if one would not sort after its predecessor."""
    names = sorted(p.name for p in index_dir.iterdir() if p.is_file() and p.name.isdigit())
    final: list[str] = []
    for i, name in enumerate(names):
        target = keep[i] if i < len(keep) else name
        while final and target <= final[-1]:
            target = f"{int(target) + 1:0{len(target)}d}"
        final.append(target)
    for i, (name, target) in enumerate(zip(names, final)):
        if name != target:
            (index_dir / name).rename(index_dir / f"{target}.rename{i}")
    for i, (name, target) in enumerate(zip(names, final)):
        if name != target:
            (index_dir / f"{target}.rename{i}").rename(index_dir / target)
    return tuple(final)


def reindex(spark: SparkSession, settings: ReindexSettings, *, progress: Progress | None = None) -> ReindexResult:
    config = settings.config
    root = config.root_dir
    queues, index = settings.consume_queue, settings.index and config.message_index_enable
    if settings.topic is not None and index:
        raise ConfigError("the index holds every topic: rebuild one topic's ConsumeQueues only (no index)")
    if not (queues or index):
        raise ConfigError("nothing to rebuild: choose the ConsumeQueues, the index, or both")
    check_store_idle(root, force=settings.force)
    started = time.monotonic()
    _clean_leftovers(root)
    spark.dataSource.register(DispatchDataSource)

    plan: RangePlan = plan_ranges(root, stride=settings.stride, skip_corrupt=settings.skip_corrupt)
    if plan.corrupt and not settings.skip_corrupt:
        a, b = plan.corrupt[0]
        raise CorruptSegmentError(f"corrupt CommitLog bytes at offset {a} (up to {b}): reindex stopped, nothing "
                                  "changed (--skip-corrupt steps over them)", a)
    cq_staging, index_staging = root / ("consumequeue" + STAGING), root / ("index" + STAGING)
    clock = _StoreClock()
    cq_store = ConsumeQueueStore(cq_staging, config.mapped_file_size_consume_queue, lambda _o, _s: -1)
    index_service = (IndexService(index_staging, hash_slot_num=config.max_hash_slot_num,
                                  index_num=config.max_index_num, clock_ms=clock) if index else None)
    dispatchers: list[CommitLogDispatcher] = [cq_store] if queues else []
    if index_service is not None:
        dispatchers.append(index_service)
    keep_names = _old_index_names(config.index_dir)
    total = sum(r.end - r.start for r in plan.ranges)
    per_wave = max(2, 2 * spark.sparkContext.defaultParallelism)
    done_bytes = records = 0
    dispatched_end, last_store_ts = 0, 0
    corrupt = list(plan.corrupt)
    if progress:
        progress("reindex", 0, total)
    try:
        for wave in _waves(plan.ranges, per_wave):
            table = _read_wave(spark, wave, config.message_delay_level, settings.topic, queues)
            for row in table.to_pylist():
                if row["bad"]:
                    bad = (row["commitlog_offset"], row["commitlog_offset"] + row["msg_size"])
                    if not settings.skip_corrupt:
                        raise CorruptSegmentError(
                            f"corrupt CommitLog record at offset {bad[0]}: reindex stopped, nothing changed "
                            "(--skip-corrupt steps over it)", bad[0])
                    log.error("skipped corrupt CommitLog record at [%d, %d)", *bad)
                    corrupt.append(bad)
                    continue
                clock.now_ms = row["store_timestamp"]
                dispatch_to(dispatchers, DispatchRequest(
                    msg_size=row["msg_size"], topic=row["topic"], queue_id=row["queue_id"],
                    commit_log_offset=row["commitlog_offset"], tags_code=row["tags_code"],
                    store_timestamp=row["store_timestamp"], consume_queue_offset=row["queue_offset"],
                    keys=row["keys"] or "", uniq_key=row["uniq_key"], sys_flag=row["sys_flag"]))
                records += 1
                dispatched_end = row["commitlog_offset"] + row["msg_size"]
                last_store_ts = row["store_timestamp"]
            done_bytes += sum(r.end - r.start for r in wave)
            if progress:
                progress("reindex", done_bytes, total)
        cq_store.flush(0)
        index_stamp = index_service.flush() if index_service is not None else 0
    except BaseException:
        cq_store.shutdown()
        if index_service is not None:
            index_service.shutdown()
        shutil.rmtree(cq_staging, ignore_errors=True)
        shutil.rmtree(index_staging, ignore_errors=True)
        raise
    logics_stamp = cq_store.last_dispatched_timestamp
    queue_count = len(cq_store.all())
    cq_store.shutdown()
    if index_service is not None:
        index_service.shutdown()

    names: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    if queues:
        cq_staging.mkdir(parents=True, exist_ok=True)
        if settings.topic is None:
            kept = _carry_over(cq_staging, config.consume_queue_dir, None)
            _swap(cq_staging, config.consume_queue_dir)
        else:
            staged_topic, live_topic = cq_staging / settings.topic, config.consume_queue_dir / settings.topic
            staged_topic.mkdir(parents=True, exist_ok=True)
            kept = _carry_over(cq_staging, config.consume_queue_dir, settings.topic)
            config.consume_queue_dir.mkdir(parents=True, exist_ok=True)
            _swap(staged_topic, live_topic)
            if not any(live_topic.iterdir()):
                live_topic.rmdir()
            shutil.rmtree(cq_staging, ignore_errors=True)
    if index:
        index_staging.mkdir(parents=True, exist_ok=True)
        names = _name_index_files(index_staging, keep_names)
        _swap(index_staging, config.index_dir)
    unfiltered = queues and settings.topic is None  # every record went by: the last one is the newest
    _update_checkpoint(config, last_store_ts if unfiltered else 0, logics_stamp if queues and settings.topic is None else None,
                       index_stamp if index else None)
    result = ReindexResult(records, done_bytes, queue_count, kept, names, tuple(corrupt), dispatched_end,
                           time.monotonic() - started)
    log.info("reindex of %s: %s", root, result.summary())
    return result


def _update_checkpoint(config: StoreConfig, physic: int, logics: int | None, index: int | None) -> None:
    """The timestamps the broker flushes at a clean shutdown: the newest CommitLog record, the
    newest record with a ConsumeQueue entry, the end of the newest index file."""
    checkpoint = StoreCheckpoint(config.checkpoint_path)
    try:
        if physic:
            checkpoint.physic_msg_timestamp = physic
        if logics is not None:
            checkpoint.logics_msg_timestamp = logics
        if index is not None:
            checkpoint.index_msg_timestamp = index
        checkpoint.flush()
    finally:
        checkpoint.shutdown()


def run_reindex(values: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler's entry point: settings as a plain mapping, a JSON-able summary back."""
    from lakemq.jobs.session import build_session

    settings = ReindexSettings.from_mapping(values)
    spark = build_session(master=settings.master, app_name="lakemq-reindex")
    return reindex(spark, settings).summary()
