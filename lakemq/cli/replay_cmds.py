"""``lakemq replay`` and ``lakemq sweep delay``: re-produce history from the lake through a broker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from lakemq.broker.broker_conf import read_broker_conf
from lakemq.cli import main
from lakemq.cli.client_cmds import log_to_file, namesrv_option
from lakemq.cli.lake_service import before_lake_imports, lake_session, service_option
from lakemq.cli.progress import JobProgress
from lakemq.common.timeparse import parse_millis
from lakemq.common.validation import check_topic
from lakemq.errors import LakeError
from lakemq.tiering.lake_fs import LakeLocation, parse_storage_options

log = logging.getLogger(__name__)


@main.command("replay")
@namesrv_option
@click.option("--topic", "-t", required=True, help="the topic whose history to replay")
@click.option("--from", "begin", required=True, help="stored at or after (epoch ms or ISO time)")
@click.option("--to", "end", required=True, help="stored at or before (epoch ms or ISO time)")
@click.option("--target-topic", help="send to this topic instead of TOPIC")
@click.option("--rate", type=float, help="at most this many messages per second")
@click.option(
    "--batch", type=click.IntRange(1, 1024), default=128, show_default=True, help="messages per send"
)
@click.option("--lake", required=True, help="lake URI")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option(
    "--checkpoint",
    type=click.Path(dir_okay=False),
    help="the ledger of what the target holds, kept across runs and windows "
    "(default: ~/.lakemq/replay/TOPIC-to-TARGET-HASH.json, one per cluster and lake)",
)
@click.option("--master", help="Spark master for reading the lake")
@service_option
def replay_cmd(
    namesrv: str,
    topic: str,
    begin: str,
    end: str,
    target_topic: str | None,
    rate: float | None,
    batch: int,
    lake: str,
    storage_option: tuple[str, ...],
    checkpoint: str | None,
    master: str | None,
    service: str | None,
) -> None:
    """Re-produce TOPIC's messages stored between --from and --to, rate-limited. Each message
    goes to the target once, whatever the windows of earlier runs (a ledger records what the
    target holds); a message of source queue q goes to the target's queue q mod its queue count."""
    before_lake_imports(service, master)
    from lakemq.client import SyncProducer
    from lakemq.jobs.broker_lookup import broker_lookup
    from lakemq.jobs.replay import ledger_path, pipelined_sender, replay

    log_to_file()
    begin_ms, end_ms = parse_millis(begin, 0), parse_millis(end, 0)
    target = check_topic(target_topic or topic)
    location = LakeLocation.of(lake, parse_storage_options(storage_option))  # no Spark for a bad --lake
    path = Path(checkpoint) if checkpoint else ledger_path(Path.home(), check_topic(topic), target, namesrv, lake)
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        JobProgress() as progress,
        lake_session(service, master, progress) as spark,
        SyncProducer("lakemq_replay", namesrv_addr=namesrv) as producer,
        broker_lookup(namesrv) as found,
    ):
        progress.phase("reading the lake's messages")
        result = replay(
            spark,
            lake_uri=location.uri,
            topic=topic,
            begin_ms=begin_ms,
            end_ms=end_ms,
            send_batch=pipelined_sender(producer, target),
            checkpoint=path,
            target_topic=target,
            rate=rate,
            batch=batch,
            found_at_broker=found,
            storage_options=location.options,
            progress=progress.counter("replay"),
        )
    click.echo(
        f"replayed {result.sent} message(s) to {target} in {result.seconds:.1f}s"
        f" ({result.skipped + result.recovered} already there from an earlier run, not sent again; ledger {path})"
    )


@main.group()
def sweep() -> None:
    """Deliver from the lake what the hot tier can no longer deliver."""


def sweep_settings(namesrv: str, lake: str | None, config: str | None, storage_option: tuple[str, ...],
                   master: str | None) -> dict[str, Any]:
    """The settings every sweep job takes from its command line (the job's own keys, and the
    lake when ``--lake`` is not given, come from the broker.conf named by ``--config``); a
    bad conf or no lake fails here, before Spark starts."""
    from lakemq.cli.lake_cmds import lake_settings  # the tiering commands (and numpy): not for replay

    _props, location = lake_settings(config, lake, storage_option)
    return {
        "lake_uri": location.uri,
        "namesrv": namesrv,
        "broker_conf": config,
        "storage_options": location.options,
        "master": master,
    }


def sweep_phase(config: str | None, finding: str) -> str:
    """A sweep's first progress line. A conf that names a lake service hears why the sweep does
    not use it: a sweep is one Spark job built around its own session (the DAGs and
    spark-submit run the same job), not wired to a remote one."""
    service = read_broker_conf(config).get("lakeServiceAddr")
    why = f"not using the lake service at {service}: a sweep runs its own Spark job; " if service else ""
    return f"{why}starting Spark and finding {finding} in the lake"


@sweep.command("delay")
@namesrv_option
@click.option("--lake", help="lake URI [lakeUri]")
@click.option(
    "--config",
    "-c",
    type=click.Path(exists=True, dir_okay=False),
    help="broker.conf (messageDelayLevel, delaySweepGraceMs, delaySweepBatch, lakeUri)",
)
@click.option("--now", "now", help="deliver what was due by this time (epoch ms or ISO time; default: now)")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--master", help="Spark master")
def sweep_delay_cmd(
    namesrv: str,
    lake: str | None,
    config: str | None,
    now: str | None,
    storage_option: tuple[str, ...],
    master: str | None,
) -> None:
    """Deliver due delayed messages found only in the lake, each once (re-runs deliver nothing twice)."""
    from lakemq.jobs.delay_sweep import run_sweep
    from lakemq.jobs.session import spark_error_line, spark_errors

    log_to_file()
    settings = sweep_settings(namesrv, lake, config, storage_option, master)
    with JobProgress() as progress:
        progress.phase(sweep_phase(config, "due delayed messages"))
        try:
            result = run_sweep(settings, now_ms=parse_millis(now, 0) or None)
        except spark_errors() as exc:
            log.exception("the delay sweep failed")
            raise LakeError(f"Spark job failed: {spark_error_line(exc)}") from exc
    click.echo(
        f"delivered {result['sent']} due delayed message(s) in {result['seconds']:.1f}s; "
        f"{result['found']} were already at the broker (recorded, not sent again)"
    )
