"""``lakemq reindex``: rebuild a stopped broker's ConsumeQueue and IndexFile files from its
CommitLog (:mod:`lakemq.jobs.reindex`).

File sizes, index slots and delay levels must be the broker's: pass its broker.conf with
``-c``. The store is found as the broker finds it: ``--data-dir``, else ``storePathRootDir``,
else ``~/lakemq-data``. The lake (``--lake``, else the conf's ``lakeUri``) says where queues
whose records left the local disk ended.
"""

from __future__ import annotations

from typing import Any

import click

from lakemq.cli import main
from lakemq.cli.lake_cmds import spark_session
from lakemq.cli.progress import JobProgress
from lakemq.common.logs import setup_logging
from lakemq.tiering.lake_fs import parse_storage_options


@main.command("reindex")
@click.option("--config", "-c", type=click.Path(exists=True, dir_okay=False), help="the broker's broker.conf")
@click.option("--data-dir", "--store-dir", "store_dir", type=click.Path(file_okay=False),
              help="the broker's store root, as given to `lakemq broker --data-dir` [storePathRootDir, "
                   "else ~/lakemq-data]")
@click.option("--lake", help="the lake the CommitLog was tiered to [lakeUri]")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--allow-offset-reuse", is_flag=True,
              help="rebuild although older CommitLog files are gone and nothing says where their queues ended "
                   "(such queues may hand out used offsets again)")
@click.option("--topic", help="rebuild only this topic's ConsumeQueues")
@click.option("--consume-queue", "consume_queue", is_flag=True, help="rebuild the ConsumeQueues (default: both)")
@click.option("--index", "index", is_flag=True, help="rebuild the IndexFiles (default: both)")
@click.option("--skip-corrupt", is_flag=True, help="step over corrupt CommitLog bytes (reported) instead of stopping")
@click.option("--force", is_flag=True, help="run although the abort file says the broker did not stop cleanly")
@click.option("--master", help="Spark master (default from conf/spark-defaults.conf)")
def reindex_cmd(config: str | None, store_dir: str | None, lake: str | None, storage_option: tuple[str, ...],
                allow_offset_reuse: bool, topic: str | None, consume_queue: bool, index: bool,
                skip_corrupt: bool, force: bool, master: str | None) -> None:
    """Rebuild ConsumeQueue and IndexFile files from the CommitLog (the broker must be stopped)."""
    from lakemq.jobs.reindex import ReindexSettings, check_store_idle, floors_for, reindex

    setup_logging("lakemq-reindex")
    both = not (consume_queue or index)
    values: dict[str, Any] = {"broker_conf": config, "store_dir": store_dir, "topic": topic,
                              "consume_queue": both or consume_queue, "index": (both and topic is None) or index,
                              "skip_corrupt": skip_corrupt, "force": force, "master": master, "lake_uri": lake,
                              "storage_options": parse_storage_options(storage_option),
                              "allow_offset_reuse": allow_offset_reuse}
    settings = ReindexSettings.from_mapping(values)
    check_store_idle(settings.config.root_dir, force=force)  # before Spark starts: a bad dir fails fast
    if settings.consume_queue:
        floors_for(settings)  # likewise a rebuild that would reuse queue offsets
    with JobProgress() as progress, spark_session(master, progress) as spark:
        result = reindex(spark, settings, progress=lambda step, done, total: progress.step(step, done, total, "bytes"))
    click.echo(f"rebuilt {result.queues} ConsumeQueue(s) and {len(result.index_files)} index file(s) from "
               f"{result.records} records ({result.bytes / 1e6:.1f} MB) in {result.seconds:.1f}s")
    for queue in result.kept_queues:
        click.echo(f"kept {queue}: none of its records is left in the CommitLog")
    for line in result.continued:
        click.echo(f"continued {line}")
    for a, b in result.corrupt:
        click.echo(f"skipped corrupt CommitLog bytes [{a}, {b})")
