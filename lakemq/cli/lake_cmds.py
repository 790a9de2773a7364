"""``lakemq tier run|serve|status``: the lake tier from the command line (``lakemq sql`` is in sql_cmds).

Settings come from the broker's broker.conf (``storePathRootDir``, ``brokerName``,
``lakeUri``, ``fileReservedTime``, ``tierSealIdleMs`` ...), read as the broker reads it (an
unknown key or a bad value is an error), and are overridden by options. The store is found
as the broker finds it (``--data-dir``, else ``storePathRootDir``, else ``~/lakemq-data``),
and a missing store is an error; so is a missing lake (``--lake``, else ``lakeUri``: never the
working directory). Lake storage options (S3 endpoint, keys) are ``-o KEY=VALUE`` in
object_store spelling, e.g. ``-o AWS_ENDPOINT_URL=http://...``. Progress goes to stderr as it
happens (:mod:`lakemq.cli.progress`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.cli import main
from lakemq.cli.output import print_rows
from lakemq.cli.progress import JobProgress
from lakemq.common.config import bind
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError, LakeError
from lakemq.store.config import BrokerRole, StoreConfig, check_store_root, store_root
from lakemq.tiering.config import DELETE_WITHOUT_COLD_READS_FLAG, TieringConfig
from lakemq.tiering.lake_fs import LakeLocation, parse_storage_options
from lakemq.tiering.manifest import Manifest
from lakemq.tiering.tail import untiered_tail

log = logging.getLogger(__name__)


def lake_settings(config: str | None, lake: str | None, storage_option: tuple[str, ...]
                  ) -> tuple[dict[str, str], LakeLocation]:
    """(broker.conf's properties, the lake) as every lake command takes them: the conf read
    as the broker reads it (an unknown key or a bad value is an error), the lake from
    ``--lake``, else the conf's ``lakeUri``; no lake, or a lake that is a file, is an error."""
    props = read_broker_conf(config)
    return props, _lake(props, lake, storage_option)


def _lake(props: dict[str, str], lake: str | None, storage_option: tuple[str, ...]) -> LakeLocation:
    return LakeLocation.of(lake or props.get("lakeUri", ""), parse_storage_options(storage_option))


def _settings(config: str | None, store: str | None, lake: str | None, broker: str | None,
              storage_option: tuple[str, ...], from_slave: bool = True
              ) -> tuple[Path, str, TieringConfig, dict[str, str], LakeLocation]:
    """(store root, broker name, tiering config, the conf's properties, the lake); the store
    must exist. A SLAVE's store (brokerRole in the conf) only ``from_slave``: tiering runs
    from the master."""
    props = read_broker_conf(config)
    if bind(StoreConfig, props).broker_role is BrokerRole.SLAVE and not from_slave:
        raise ConfigError("this is a SLAVE's store: tiering runs from the master (the same CommitLog); when the "
                          "master is lost, pass --from-slave to tier from here (docs/REPLICATION.md)")
    store_dir = store_root(props, store)
    check_store_root(store_dir)
    location = _lake(props, lake, storage_option)
    tiering = bind(TieringConfig, props, lake_uri=location.uri)
    return store_dir, broker or props.get("brokerName", "broker-a"), tiering, props, location


@contextlib.contextmanager
def spark_session(master: str | None, progress: JobProgress | None = None,
                  conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A session for one command (stopped after it, unless it was already running in this
    process); Spark's own failures become one-line LakeErrors."""
    from pyspark.sql import SparkSession

    from lakemq.jobs.session import build_session, spark_error_line, spark_errors

    owned = SparkSession.getActiveSession() is None
    if progress is not None:
        progress.phase(f"starting Spark ({master})" if master and owned else
                       "starting Spark" if owned else "joining the running Spark session")
    spark = build_session(master=master, app_name="lakemq-cli", conf=conf)
    try:
        yield spark
    except spark_errors() as exc:
        log.exception("Spark job failed")
        raise LakeError(f"Spark job failed: {spark_error_line(exc)}") from exc
    finally:
        if owned:
            if progress is not None:
                progress.phase("stopping Spark")
            spark.stop()


_common = [
    click.option("--config", "-c", type=click.Path(exists=True, dir_okay=False), help="broker.conf"),
    click.option("--data-dir", "--store", "store", type=click.Path(file_okay=False),
                 help="the broker's store root, as given to `lakemq broker --data-dir` [storePathRootDir, "
                      "else ~/lakemq-data]"),
    click.option("--lake", help="lake URI (lakeUri): a directory or s3://bucket/prefix"),
    click.option("--broker", help="broker name (brokerName)"),
    click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store"),
]


def _with_common(fn: Any) -> Any:
    for option in reversed(_common):
        fn = option(fn)
    return fn


@main.group()
def tier() -> None:
    """Move sealed CommitLog segments into the Delta lake."""


@tier.command("run")
@_with_common
@click.option("--master", help="Spark master (default from conf/spark-defaults.conf)")
@click.option("--skip-corrupt", is_flag=True, help="leave corrupt records out (reported) instead of failing")
@click.option("--no-retention", is_flag=True, help="keep local CommitLog files even when verified")
@click.option(DELETE_WITHOUT_COLD_READS_FLAG, "delete_without_cold_reads", is_flag=True,
              help="delete verified files older than fileReservedTime even though the broker's conf has no "
                   "lakeUri naming this lake (the broker then cannot serve those offsets)")
@click.option("--no-maintain", is_flag=True, help="skip optimize, vacuum and checkpoint")
@click.option("--from-slave", is_flag=True,
              help="tier a SLAVE's store (brokerRole=SLAVE in --config): for when its master is lost")
@click.option("--flushed", is_flag=True,
              help="also commit every whole record the broker has flushed, without waiting for its file to "
                   "fill or idle")
def tier_run_cmd(config: str | None, store: str | None, lake: str | None, broker: str | None,
                 storage_option: tuple[str, ...], master: str | None, skip_corrupt: bool, no_retention: bool,
                 delete_without_cold_reads: bool, no_maintain: bool, from_slave: bool, flushed: bool) -> None:
    """Seal, compact, verify, apply hot retention (as the broker's own retention rules allow)
    and maintain the table, once."""
    from lakemq.jobs.tier_run import tier_run
    from lakemq.tiering.retention import RetentionRules

    setup_logging("lakemq-tier")
    store_dir, broker_name, tiering, props, location = _settings(config, store, lake, broker, storage_option,
                                                                 from_slave)
    rules = None if no_retention else RetentionRules.for_broker(
        props, location, delete_without_cold_reads=delete_without_cold_reads)
    with JobProgress() as progress, spark_session(master, progress) as spark:
        result = tier_run(spark, store_dir=store_dir, broker_name=broker_name, config=tiering,
                          storage_options=location.options, skip_corrupt=skip_corrupt,
                          retention=rules, upkeep=not no_maintain, progress=progress.step, flushed=flushed)
    c = result.compact
    kept = result.retention.kept
    click.echo(f"committed {len(c.committed)} range(s), {c.rows} rows, {c.bytes_in / 1e6:.1f} MB in {c.seconds:.1f}s; "
               f"verified {result.verified}; deleted {len(result.deleted)} local file(s)"
               + (f"; kept {len(kept)} verified local file(s): {result.retention.why_kept}" if kept else ""))
    for a, b in c.skipped_corrupt:
        click.echo(f"skipped corrupt CommitLog bytes [{a}, {b})")
    if flushed:
        return  # what is past the lake's end now was written or flushed after the run read the store
    tail = untiered_tail(store_dir, Manifest.open(location, broker_name).committed_end,
                         idle_ms=tiering.tier_seal_idle_ms)
    for waiting in tail.waiting:
        click.echo(f"not yet in the lake: {waiting.why(tiering.tier_seal_idle_ms)}")


@tier.command("serve")
@_with_common
@click.option("--master", help="Spark master (default from conf/spark-defaults.conf)")
@click.option("--interval-ms", type=click.IntRange(min=1), help="the lake lag passes aim for, ms [tierIntervalMs, 60000]")
@click.option("--no-retention", is_flag=True, help="keep local CommitLog files even when verified")
@click.option(DELETE_WITHOUT_COLD_READS_FLAG, "delete_without_cold_reads", is_flag=True,
              help="as for `tier run`")
@click.option("--from-slave", is_flag=True,
              help="tier a SLAVE's store (brokerRole=SLAVE in --config): for when its master is lost")
def tier_serve_cmd(config: str | None, store: str | None, lake: str | None, broker: str | None,
                   storage_option: tuple[str, ...], master: str | None, interval_ms: int | None, no_retention: bool,
                   delete_without_cold_reads: bool, from_slave: bool) -> None:
    """Keep the lake fresh: commit what the broker has flushed (full file or not) within
    tierIntervalMs, exactly once, on one warm Spark session; SIGTERM stops after the pass under way."""
    import dataclasses
    import signal
    import threading

    from lakemq.jobs.lake_service import LakeService, query_slot, service_url, warm
    from lakemq.jobs.session import session_conf
    from lakemq.jobs.tier_serve import ServePass, tier_serve
    from lakemq.jobs.tier_warm import warm_up
    from lakemq.tiering.retention import RetentionRules

    setup_logging("lakemq-tier")
    store_dir, broker_name, tiering, props, location = _settings(config, store, lake, broker, storage_option,
                                                                 from_slave)
    if interval_ms is not None:
        tiering = dataclasses.replace(tiering, tier_interval_ms=interval_ms)
    rules = None if no_retention else RetentionRules.for_broker(
        props, location, delete_without_cold_reads=delete_without_cold_reads)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def said(p: ServePass) -> None:
        c = p.result.compact
        end = max((e.range_end for e in c.committed), default=None)
        click.echo(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pass {p.number}: committed {len(c.committed)} range(s), "
                   f"{c.rows} rows" + (f" up to CommitLog offset {end}" if end is not None else "")
                   + f"; deleted {len(p.result.deleted)} local file(s)"
                   + ("; table maintained" if p.maintained else "") + f"; {p.seconds:.1f}s")

    # FAIR: the lake service's queries do not queue behind a pass's tasks (TIER_POOL); with a
    # local master they also get a task slot the passes leave free.
    spark_conf = {"spark.scheduler.mode": "FAIR"}
    if tiering.lake_service_addr:
        spark_conf |= query_slot(session_conf(master=master, class_archive=False)["spark.master"])
    with JobProgress() as progress, spark_session(spark_conf.pop("spark.master", master), progress,
                                                  spark_conf) as spark:
        service = (LakeService(spark, location, tiering.lake_service_addr, props.get("namesrvAddr") or None)
                   if tiering.lake_service_addr else None)

        def opened() -> None:
            if service is not None and service.open_when_ready():
                click.echo(f"lake service ready on {service_url(service.addr)} (lake {location.uri}; "
                           f"{', '.join(service.names or ())})")
                sys.stdout.flush()

        def after(p: ServePass) -> None:
            said(p)
            opened()  # a lake without a messages table opens the service once a pass made it

        # Spark's first queries and first pass are its slowest: pay that now, not in the lag of
        # what the first pass with data commits.
        progress.phase("warming up: a tier pass over a scratch store and lake")
        warmed = warm_up(spark)
        progress.phase("warming Spark on the lake" + (" and opening the lake service" if service else ""))
        warm(spark, location)
        click.echo(f"tier serve ready: warmed up in {warmed.seconds:.1f}s (a pass of {warmed.rows} scratch row(s) "
                   f"in {warmed.tasks} Spark task(s)); lake lag target {tiering.tier_interval_ms} ms")
        sys.stdout.flush()
        opened()
        progress.phase(f"serving: lake lag target {tiering.tier_interval_ms} ms (SIGTERM stops)")
        try:
            passes = tier_serve(spark, store_dir=store_dir, broker_name=broker_name, config=tiering, stop=stop,
                                storage_options=location.options, retention=rules, on_pass=after)
        finally:
            if service is not None:
                service.close()
    click.echo(f"stopped after {passes} pass(es)")


@tier.command("status")
@_with_common
def tier_status_cmd(config: str | None, store: str | None, lake: str | None, broker: str | None,
                    storage_option: tuple[str, ...]) -> None:
    """Every range the manifest holds or the store has sealed, its state, and whether its
    CommitLog file is still local."""
    from lakemq.tiering.seal import commitlog_files, load_seals

    setup_logging("lakemq-tier")
    store_dir, broker_name, tiering, _props, location = _settings(config, store, lake, broker, storage_option)
    with JobProgress() as progress:
        progress.phase("reading the manifest and the Delta log")
        manifest = Manifest.open(location, broker_name)
        progress.phase("reading the store")
        seals = {s.range_start: s for s in load_seals(store_dir)}
        files = commitlog_files(store_dir)
        tail = untiered_tail(store_dir, manifest.committed_end, idle_ms=tiering.tier_seal_idle_ms)
    local = {f.path.name for f in files}
    rows = []
    for start in sorted({*seals, *(e.range_start for e in manifest.entries)}):
        entry, seal = manifest.entry(start), seals.get(start)
        end = entry.range_end if entry is not None else seal.range_end if seal is not None else start
        segment = entry.segment if entry is not None else seal.file_name if seal is not None else ""
        state = "sealed" if entry is None else ("verified" if entry.verified else "committed")
        count = entry.rows if entry is not None else seal.rows if seal is not None else 0
        rows.append((f"[{start}, {end})", segment, state, str(count),
                     "" if entry is None else str(entry.delta_version), "present" if segment in local else "deleted"))
    for waiting in tail.waiting:
        rows.append((f"[{waiting.start}, {waiting.end})", waiting.file_name, "not sealed", str(waiting.messages), "",
                     "present"))
    click.echo(f"{broker_name}: store {store_dir}, lake {location.uri}")
    print_rows(("range", "segment", "state", "rows", "delta version", "local file"), rows)
    click.echo(f"local CommitLog files: {len(files)}; committed to {manifest.committed_end}; "
               f"verified to {manifest.verified_end}; manifest ranges: {len(manifest.entries)}")
    click.echo(f"untiered tail: {tail.bytes:,} bytes, {tail.messages:,} messages past the lake's end "
               f"({tail.lake_end} to {tail.store_end})")
    for waiting in tail.waiting:
        click.echo(f"not yet in the lake: {waiting.why(tiering.tier_seal_idle_ms)}")
