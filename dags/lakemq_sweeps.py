"""Sweeps: deliver delayed messages the hot tier can no longer deliver, from the lake.

``delay_sweep`` (:mod:`lakemq.jobs.delay_sweep`) finds messages whose delivery time passed by
the run's data interval end but which never reached their real topic, and sends them through
the broker. It records every delivery in the lake's ``delay_sweep`` outcome table keyed on
the source message's offset id, so a retried or re-run interval delivers nothing twice.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task
from lakemq_dag_common import DEFAULT_ARGS, INTERVAL_END_MS, PROJECT_PYTHON, common_params, settings_template


@task.external_python(python=PROJECT_PYTHON, expect_airflow=False)
def delay_sweep(settings: str, interval_end_ms: str) -> dict:
    """The sweep in the project's interpreter (pyspark and lakemq are imported there)."""
    import json

    from lakemq.jobs.delay_sweep import run_sweep

    return run_sweep(json.loads(settings), now_ms=int(interval_end_ms) if interval_end_ms else None)


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
    delay_sweep(settings_template("lake_uri", "namesrv"), INTERVAL_END_MS)


lakemq_sweeps()
