"""``lakemq tier run|status`` and ``lakemq sql``: the lake tier from the command line.

Settings come from a broker.conf (``storePathRootDir``, ``brokerName``, ``lakeUri``,
``tierSealIdleMs`` ...) and are overridden by options. Lake storage options (S3 endpoint,
keys) are ``-o KEY=VALUE`` in object_store spelling, e.g. ``-o AWS_ENDPOINT_URL=http://...``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lakemq.cli import main
from lakemq.common.config import bind, read_properties
from lakemq.common.logs import setup_logging
from lakemq.errors import ConfigError, LakeError
from lakemq.store.config import BrokerRole, StoreConfig
from lakemq.tiering.config import TieringConfig

log = logging.getLogger(__name__)


def _settings(config: str | None, store: str | None, lake: str | None, broker: str | None,
              from_slave: bool = True) -> tuple[Path, str, TieringConfig]:
    props = read_properties(config) if config else {}
    store_config = bind(StoreConfig, props)
    if store_config.broker_role is BrokerRole.SLAVE and not from_slave:
        raise ConfigError("this is a SLAVE's store: tiering runs from the master (the same CommitLog); when the "
                          "master is lost, pass --from-slave to tier from here (docs/REPLICATION.md)")
    store_dir = Path(store) if store else store_config.root_dir
    overrides: dict[str, Any] = {"lake_uri": lake} if lake else {}
    tiering = bind(TieringConfig, props, **overrides)
    return store_dir, broker or props.get("brokerName", "broker-a"), tiering


def parse_storage_options(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"storage option {pair!r} is not KEY=VALUE")
        out[key] = value
    return out


@contextlib.contextmanager
def spark_session(master: str | None) -> Iterator[Any]:
    """A session for one command (stopped after it, unless it was already running in this
    process); Spark's own failures become one-line LakeErrors."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from lakemq.jobs.session import build_session

    owned = SparkSession.getActiveSession() is None
    spark = build_session(master=master, app_name="lakemq-cli")
    try:
        yield spark
    except PySparkException as exc:
        log.exception("Spark job failed")
        raise LakeError(f"Spark job failed: {str(exc).strip().splitlines()[0]}") from exc
    finally:
        if owned:
            spark.stop()


_common = [
    click.option("--config", "-c", type=click.Path(exists=True, dir_okay=False), help="broker.conf"),
    click.option("--store", type=click.Path(file_okay=False), help="store root (storePathRootDir)"),
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
@click.option("--no-maintain", is_flag=True, help="skip optimize, vacuum and checkpoint")
@click.option("--from-slave", is_flag=True,
              help="tier a SLAVE's store (brokerRole=SLAVE in --config): for when its master is lost")
def tier_run_cmd(config: str | None, store: str | None, lake: str | None, broker: str | None,
                 storage_option: tuple[str, ...], master: str | None, skip_corrupt: bool, no_retention: bool,
                 no_maintain: bool, from_slave: bool) -> None:
    """Seal, compact, verify, apply hot retention and maintain the table, once."""
    from lakemq.jobs.tier_run import tier_run

    setup_logging("lakemq-tier")
    store_dir, broker_name, tiering = _settings(config, store, lake, broker, from_slave)
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar, spark_session(master) as spark:
        tasks: dict[str, Any] = {}

        def progress(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = bar.add_task(step, total=max(total, 1))
            bar.update(tasks[step], completed=done if total else 1, total=max(total, 1))

        result = tier_run(spark, store_dir=store_dir, broker_name=broker_name, config=tiering,
                          storage_options=parse_storage_options(storage_option), skip_corrupt=skip_corrupt,
                          retention=not no_retention, upkeep=not no_maintain, progress=progress)
    c = result.compact
    click.echo(f"committed {len(c.committed)} range(s), {c.rows} rows, {c.bytes_in / 1e6:.1f} MB in {c.seconds:.1f}s; "
               f"verified {result.verified}; deleted {len(result.deleted)} local file(s)")
    for a, b in c.skipped_corrupt:
        click.echo(f"skipped corrupt CommitLog bytes [{a}, {b})")


@tier.command("status")
@_with_common
def tier_status_cmd(config: str | None, store: str | None, lake: str | None, broker: str | None,
                    storage_option: tuple[str, ...]) -> None:
    """What is sealed, committed and verified, and which local files remain."""
    from lakemq.tiering.lake_fs import LakeLocation
    from lakemq.tiering.manifest import Manifest
    from lakemq.tiering.seal import commitlog_files, load_seals

    setup_logging("lakemq-tier")
    store_dir, broker_name, tiering = _settings(config, store, lake, broker)
    location = LakeLocation.of(tiering.lake_uri, parse_storage_options(storage_option))
    manifest = Manifest.open(location, broker_name)
    table = Table(title=f"{broker_name}: lake {location.uri}")
    for col in ("range", "segment", "state", "rows", "delta version"):
        table.add_column(col)
    for seal in load_seals(store_dir):
        entry = manifest.entry(seal.range_start)
        state = "sealed" if entry is None else ("verified" if entry.verified else "committed")
        table.add_row(f"[{seal.range_start}, {seal.range_end})", seal.file_name, state, str(seal.rows),
                      "" if entry is None else str(entry.delta_version))
    console = Console()
    console.print(table)
    files = commitlog_files(store_dir)
    console.print(f"local CommitLog files: {len(files)}; committed to {manifest.committed_end}; "
                  f"verified to {manifest.verified_end}; manifest ranges: {len(manifest.entries)}")


@main.command("sql")
@click.argument("query")
@click.option("--lake", required=True, help="lake URI")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--version", "version", type=int, help="read the tables as of this Delta version")
@click.option("--limit", type=int, default=100, show_default=True, help="rows to print")
@click.option("--master", help="Spark master")
def sql_cmd(query: str, lake: str, storage_option: tuple[str, ...], version: int | None, limit: int,
            master: str | None) -> None:
    """Run Spark SQL over the lake's views (messages, transactions, ...) and print a table."""
    from lakemq.jobs.sql import run_sql

    setup_logging("lakemq-sql")
    with spark_session(master) as spark:
        df = run_sql(spark, lake, query, storage_options=parse_storage_options(storage_option), version=version)
        rows = df.limit(limit).collect()
        columns = df.columns
    table = Table(*columns)
    for row in rows:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    Console().print(table)
    click.echo(f"{len(rows)} row(s)")
