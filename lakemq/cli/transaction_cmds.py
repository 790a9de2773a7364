"""``lakemq sweep transactions``: settle pending transactions across the lake and the hot tier."""

from __future__ import annotations

import logging
from typing import Any

import click

from lakemq.cli.client_cmds import log_to_file, namesrv_option
from lakemq.cli.output import print_rows
from lakemq.cli.progress import JobProgress
from lakemq.cli.replay_cmds import sweep, sweep_phase, sweep_settings
from lakemq.errors import LakeError

log = logging.getLogger(__name__)


@sweep.command("transactions")
@namesrv_option
@click.option("--lake", help="lake URI [lakeUri]")
@click.option(
    "--config", "-c", type=click.Path(exists=True, dir_okay=False), help="broker.conf (transactionSweepBatch, lakeUri)"
)
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--master", help="Spark master")
@click.option("--access-key", envvar="LAKEMQ_ACCESS_KEY", help="an admin account's key when brokers run ACL")
@click.option("--secret-key", envvar="LAKEMQ_SECRET_KEY", help="its secret (or $LAKEMQ_SECRET_KEY)")
@click.option("--show", type=click.IntRange(0, 10_000), default=20, show_default=True,
              help="pending transactions to list")
def sweep_transactions_cmd(
    namesrv: str,
    lake: str | None,
    config: str | None,
    storage_option: tuple[str, ...],
    master: str | None,
    access_key: str | None,
    secret_key: str | None,
    show: int,
) -> None:
    """Find half messages without an Op message across history, hand the pending ones back to
    their broker's check rules and write the outcome to the lake's `transactions` table."""
    from lakemq.jobs.session import spark_error_line, spark_errors
    from lakemq.jobs.transaction_sweep import STATES, run_transaction_sweep

    log_to_file()
    values = {
        **sweep_settings(namesrv, lake, config, storage_option, master),
        "access_key": access_key,
        "secret_key": secret_key,
        "report_limit": max(show, 1),
    }
    lake_uri = values["lake_uri"]
    with JobProgress() as progress:
        progress.phase(sweep_phase(config, "half messages"))
        try:
            result = run_transaction_sweep(values, progress=progress.counter("hand back"))
        except spark_errors() as exc:
            log.exception("the transaction sweep failed")
            raise LakeError(f"Spark job failed: {spark_error_line(exc)}") from exc
    counts: dict[str, int] = result["counts"]
    click.echo(f"transactions in {lake_uri}:")
    print_rows(("state", "transactions"), [(state, str(counts.get(state, 0))) for state in STATES])
    pending: list[dict[str, Any]] = result["pending"]
    if pending and show:
        click.echo("pending transactions (oldest first):")
        print_rows(("topic", "producer group", "msg id", "uniq key", "keys", "checks", "state", "broker said"),
                   [[str(row.get(k) or "") for k in ("topic", "producer_group", "msg_id", "uniq_key", "keys",
                                                     "checks", "state", "broker_verdict")] for row in pending[:show]])
        waiting = counts.get("PENDING", 0) + counts.get("UNKNOWN", 0)
        if waiting > len(pending[:show]):
            click.echo(f"... and {waiting - len(pending[:show])} more")
    verdicts = ", ".join(f"{n} {kind}" for kind, n in sorted(result["verdicts"].items())) or "none"
    version = result["table_version"]
    click.echo(
        f"asked brokers about {result['asked']} transaction(s) (answers: {verdicts}); "
        f"{result['written']} row(s) written"
        + (f" (transactions table version {version})" if version is not None else " (table unchanged)")
        + f" in {result['seconds']:.1f}s"
    )
