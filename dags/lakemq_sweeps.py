"""Sweeps: deliver delayed messages the hot tier can no longer deliver, from the lake.

``delay_sweep`` (:mod:`lakemq.jobs.delay_sweep`) finds messages whose delivery time passed by
the run's data interval end but which never reached their real topic, and sends them through
the broker. It records every delivery in the lake's ``delay_sweep`` outcome table keyed on
the source message's offset id, so a retried or re-run interval delivers nothing twice.

``transaction_sweep`` (:mod:`lakemq.jobs.transaction_sweep`) finds half messages without an Op
message across the lake and the hot tier, hands those only the lake still holds back to their
broker's check rules (a check-back to the producer group, or a rollback past
transactionCheckMax), and MERGEs the outcome into the lake's ``transactions`` table. A re-run
hands nothing back twice. It runs after the delay sweep has finished, whether that succeeded
or not (the two share no state; one Spark job at a time keeps the machine's load down).

Each task writes what it is doing to its log as timestamped lines while it runs
(:mod:`lakemq.cli.progress`, as ``lakemq admin sweep-delay`` and ``sweep-transactions`` do).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task
from lakemq_dag_common import DEFAULT_ARGS, INTERVAL_END_MS, PROJECT_PYTHON, common_params, settings_template


@task.external_python(python=PROJECT_PYTHON, expect_airflow=False)
def delay_sweep(settings: str, interval_end_ms: str) -> dict:
    """The sweep in the project's interpreter (pyspark and lakemq are imported there)."""
    import json

    from lakemq.cli.progress import JobProgress
    from lakemq.jobs.delay_sweep import run_sweep

    with JobProgress() as progress:
        progress.phase("delay sweep: starting Spark and finding due delayed messages in the lake")
        result = run_sweep(json.loads(settings), now_ms=int(interval_end_ms) if interval_end_ms else None)
        progress.phase(f"delay sweep: delivered {result['sent']}, {result['found']} already at the broker")
        return result


@task.external_python(python=PROJECT_PYTHON, expect_airflow=False, trigger_rule="all_done")
def transaction_sweep(settings: str) -> dict:
    """The transaction sweep in the project's interpreter; returns its report (counts by state,
    the oldest pending transactions, the brokers' answers). Against brokers with ACL, set
    LAKEMQ_ACCESS_KEY / LAKEMQ_SECRET_KEY (an admin account) in the workers' environment."""
    import json

    from lakemq.cli.progress import JobProgress
    from lakemq.jobs.transaction_sweep import run_transaction_sweep

    with JobProgress() as progress:
        progress.phase("transaction sweep: starting Spark and finding half messages in the lake")
        report = run_transaction_sweep(json.loads(settings), progress=progress.counter("hand back"))
        progress.phase(f"transaction sweep: asked brokers about {report['asked']}, wrote {report['written']} row(s)")
        return report


@dag(
    dag_id="lakemq_sweeps",
    schedule="*/15 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=common_params("lake_uri", "namesrv"),
    tags=["lakemq"],
    doc_md=__doc__,
)
def lakemq_sweeps() -> None:
    delay = delay_sweep(settings_template("lake_uri", "namesrv"), INTERVAL_END_MS)
    delay >> transaction_sweep(settings_template("lake_uri", "namesrv"))


lakemq_sweeps()
