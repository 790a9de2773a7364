"""Tiering: seal -> compact -> verify -> retention -> maintain, each step its own task.

The steps are :mod:`lakemq.jobs.tier_steps` (what ``lakemq tier run`` does in one process).
Each task is idempotent: compaction commits a range once (a Delta app transaction keyed on
the broker and the range end), verification and retention act on the manifest, and sealing
decides idleness against the run's data interval end, so a retried or re-run interval does
nothing twice. One run at a time, so retention never races a compaction of the same store.
The ``flushed`` param seals every whole record the broker has flushed, full file or not (as
``lakemq tier run --flushed``); the lag then is the schedule's, so a fresh lake is
``lakemq tier serve``'s job.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, chain, dag, task
from lakemq_dag_common import DEFAULT_ARGS, INTERVAL_END_MS, PROJECT_PYTHON, common_params, settings_template

STEPS = ("seal", "compact", "verify", "retention", "maintain")


@task.external_python(python=PROJECT_PYTHON, expect_airflow=False)
def tier_step(step: str, settings: str, interval_end_ms: str) -> dict:
    """One tiering step in the project's interpreter (imports happen there, not in Airflow).
    Progress goes to the task's log as timestamped lines while the step runs."""
    import json

    from lakemq.cli.progress import JobProgress
    from lakemq.jobs.tier_steps import run_step

    with JobProgress() as progress:
        progress.phase(f"{step}: starting")
        return run_step(step, json.loads(settings), now_ms=int(interval_end_ms) if interval_end_ms else None,
                        progress=progress.step)


@dag(
    dag_id="lakemq_tiering",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={**common_params("store_dir", "lake_uri", "broker_name"),
            "flushed": Param(False, type="boolean",
                             description="also tier every whole record the broker has flushed, not only full or "
                                         "idle CommitLog files (what `lakemq tier serve` does every tierIntervalMs)")},
    tags=["lakemq"],
    doc_md=__doc__,
)
def lakemq_tiering() -> None:
    settings = settings_template("store_dir", "lake_uri", "broker_name", own=("flushed",))
    chain(*(tier_step.override(task_id=step)(step, settings, INTERVAL_END_MS) for step in STEPS))


lakemq_tiering()
