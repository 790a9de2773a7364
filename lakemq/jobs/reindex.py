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
5. every queue that ends below its floor (:mod:`lakemq.jobs.reindex_floors`: the lake's
   manifest, the committed consumer offsets, the delay levels' offsets) is continued at the
   floor, so no offset already given to a message is handed out again; a rebuild that cannot
   know where queues ended (older CommitLog files gone, in no lake, and no ConsumeQueue left
   to keep) is refused before anything changes, unless ``allow_offset_reuse``;
6. the staging directories replace ``consumequeue/`` (or one topic's directory) and
   ``index/``, and the checkpoint's timestamps are set to what the rebuilt files hold.

IndexFile names come from the data: the store time of each file's first record (counted on
from the previous name when it would not sort after it), as the broker names them, so the
rebuilt files carry the broker's names. Files ``index/`` still holds keep their names, in
order (a store written before names were derived from store times). See docs/REINDEX.md.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.common.config import bind
from lakemq.errors import ConfigError, CorruptSegmentError, StoreError
from lakemq.jobs.reindex_floors import QueueFloors, queue_floors
from lakemq.jobs.reindex_source import DispatchDataSource, DispatchRange, RangePlan, plan_ranges
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.config import StoreConfig, store_root
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.dispatch import CommitLogDispatcher, dispatch_to
from lakemq.store.index_service import IndexService
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import commitlog_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ReindexResult", "ReindexSettings", "check_store_idle", "floors_for", "holders_of", "reindex",
           "run_reindex"]

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
    continued: tuple[str, ...]  # "topic/queueId at N (witness)": raised to where the queue really ended
    index_files: tuple[str, ...]
    corrupt: tuple[tuple[int, int], ...]  # CommitLog bytes stepped over (skip_corrupt)
    dispatched_end: int  # CommitLog offset after the last record dispatched
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {"records": self.records, "bytes": self.bytes, "queues": self.queues,
                "kept_queues": list(self.kept_queues), "continued": list(self.continued),
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
    lake_uri: str = ""  # the lake the broker tiers to (its lakeUri): where queues ended
    broker_name: str = "broker-a"
    storage_options: Mapping[str, str] = field(default_factory=dict)
    allow_offset_reuse: bool = False  # rebuild even when some queues' ends cannot be known

    @property
    def lake(self) -> LakeLocation | None:
        return LakeLocation.of(self.lake_uri, self.storage_options) if self.lake_uri else None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ReindexSettings:
        """What a scheduler passes: ``store_dir``, ``broker_conf``, ``conf`` (camelCase
        overrides), ``topic``, ``consume_queue``, ``index``, ``skip_corrupt``, ``force``,
        ``master``, ``lake_uri`` (else the conf's ``lakeUri``), ``broker_name`` (else
        ``brokerName``), ``storage_options``, ``allow_offset_reuse``; unknown keys are refused."""
        known = {"store_dir", "broker_conf", "conf", "topic", "consume_queue", "index", "skip_corrupt", "force",
                 "master", "stride", "lake_uri", "broker_name", "storage_options", "allow_offset_reuse"}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown reindex setting(s): {', '.join(sorted(unknown))}")
        props = read_broker_conf(values.get("broker_conf") or None, values.get("conf"))
        # The store as the broker finds it: --data-dir, else storePathRootDir, else ~/lakemq-data.
        config = bind(StoreConfig, props, store_path_root_dir=str(store_root(props, values.get("store_dir") or None)))
        return cls(config=config, topic=values.get("topic") or None,
                   consume_queue=_bool(values.get("consume_queue", True)), index=_bool(values.get("index", True)),
                   skip_corrupt=_bool(values.get("skip_corrupt", False)), force=_bool(values.get("force", False)),
                   stride=int(values.get("stride") or 64 << 20), master=values.get("master") or None,
                   lake_uri=str(values.get("lake_uri") or props.get("lakeUri") or ""),
                   broker_name=str(values.get("broker_name") or props.get("brokerName") or "broker-a"),
                   storage_options={str(k): str(v) for k, v in (values.get("storage_options") or {}).items()},
                   allow_offset_reuse=_bool(values.get("allow_offset_reuse", False)))


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")


# -- the rebuild -------------------------------------------------------------------------------

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


def _has_queues(cq_dir: Path, topic: str | None) -> bool:
    """Whether ``consumequeue/`` still holds a queue directory (of ``topic``, if given)."""
    if not cq_dir.is_dir():
        return False
    topics = [cq_dir / topic] if topic else [p for p in cq_dir.iterdir() if p.is_dir()]
    return any(t.is_dir() and any(q.is_dir() for q in t.iterdir()) for t in topics)


def floors_for(settings: ReindexSettings) -> QueueFloors:
    """The queues' floors; refuses (StoreError, nothing changed) a rebuild that cannot know
    where queues ended: older CommitLog files are gone, no lake range covers them, and the
    ConsumeQueues that would be kept are gone too."""
    config = settings.config
    files = commitlog_files(config.root_dir)
    start = files[0].start if files else 0
    floors = queue_floors(config, start, settings.lake, settings.broker_name)
    scope = config.consume_queue_dir / settings.topic if settings.topic else config.consume_queue_dir
    if floors.unknown_below and not _has_queues(config.consume_queue_dir, settings.topic) \
            and not settings.allow_offset_reuse:
        where = (f"the lake {floors.lake} does not cover them with queue ends" if floors.lake
                 else "no lake is configured (lakeUri) to say where queues ended")
        raise StoreError(
            f"the CommitLog starts at offset {floors.unknown_below}: older files were deleted, {where}, and "
            f"{scope} is gone, so a queue whose records were all in those files would restart at a used offset. "
            "Restore the ConsumeQueue files, give the lake the CommitLog was tiered to (--lake or lakeUri), or "
            "pass --allow-offset-reuse to rebuild anyway (such queues then continue at their highest committed "
            "consumer offset, else 0); nothing changed")
    if floors.unknown_below:
        log.warning("CommitLog offsets below %d are in no lake; queues kept from %s keep their ends",
                    floors.unknown_below, scope)
    return floors


def _continue_queues(config: StoreConfig, staging: Path, floors: QueueFloors, topic: str | None) -> tuple[str, ...]:
    """Raise every staged queue of ``topic`` (all: None) that ends below its floor to it."""
    store = ConsumeQueueStore(staging, config.mapped_file_size_consume_queue, lambda _o, _s: -1)
    continued = []
    try:
        if not store.load():
            raise StoreError(f"cannot load the rebuilt ConsumeQueues in {staging}")
        store.recover()
        for (name, queue_id), floor in sorted(floors.of_topic(topic).items()):
            try:
                cq = store.find_or_create(name, queue_id)
            except ValueError as exc:  # a name no queue can have (a stale consumer offset)
                log.warning("no queue %s/%d to continue: %s", name, queue_id, exc)
                continue
            before = cq.get_max_offset_in_queue()
            if cq.continue_at(floor):
                why = floors.why[(name, queue_id)]
                continued.append(f"{name}/{queue_id} at {floor} (was {before}; {why})")
                log.info("queue %s/%d continued at %d (rebuilt to %d; %s)", name, queue_id, floor, before, why)
        store.flush(0)
    finally:
        store.shutdown()
    return tuple(continued)


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
    floors = floors_for(settings) if queues else QueueFloors()
    spark.dataSource.register(DispatchDataSource)

    plan: RangePlan = plan_ranges(root, stride=settings.stride, skip_corrupt=settings.skip_corrupt)
    if plan.corrupt and not settings.skip_corrupt:
        a, b = plan.corrupt[0]
        raise CorruptSegmentError(f"corrupt CommitLog bytes at offset {a} (up to {b}): reindex stopped, nothing "
                                  "changed (--skip-corrupt steps over them)", a)
    cq_staging, index_staging = root / ("consumequeue" + STAGING), root / ("index" + STAGING)
    cq_store = ConsumeQueueStore(cq_staging, config.mapped_file_size_consume_queue, lambda _o, _s: -1)
    index_service = (IndexService(index_staging, hash_slot_num=config.max_hash_slot_num,
                                  index_num=config.max_index_num) if index else None)
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
    continued: tuple[str, ...] = ()
    if queues:
        cq_staging.mkdir(parents=True, exist_ok=True)
        if settings.topic is None:
            kept = _carry_over(cq_staging, config.consume_queue_dir, None)
            continued = _continue_queues(config, cq_staging, floors, None)
            _swap(cq_staging, config.consume_queue_dir)
        else:
            staged_topic, live_topic = cq_staging / settings.topic, config.consume_queue_dir / settings.topic
            staged_topic.mkdir(parents=True, exist_ok=True)
            kept = _carry_over(cq_staging, config.consume_queue_dir, settings.topic)
            continued = _continue_queues(config, cq_staging, floors, settings.topic)
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
    result = ReindexResult(records, done_bytes, queue_count, kept, continued, names, tuple(corrupt), dispatched_end,
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
