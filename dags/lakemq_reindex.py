"""Reindex: rebuild a stopped broker's ConsumeQueue and IndexFile files from its CommitLog.

Triggered by hand (no schedule) after an index was lost or damaged, with the broker stopped:
the task refuses a store a process has open, or one whose broker did not shut down cleanly
unless ``force``. It runs :func:`lakemq.jobs.reindex.run_reindex`: Spark decodes the CommitLog
in parallel byte ranges and the store's own ConsumeQueue and IndexFile builders write the
files, as the broker's dispatch would. Pass the broker's conf keys (file sizes, index slots,
delay levels) through ``broker_conf`` or ``conf``. No retries: a corrupt CommitLog range
stops the run with its offset, and running it again would stop there again.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task
from lakemq_dag_common import DEFAULTS, PROJECT_PYTHON, common_params

_SETTINGS = (
    '{{ {"store_dir": params.store_dir or var.value.get("lakemq_store_dir", "%s"), '
    '"broker_conf": params.broker_conf, "conf": params.conf, "topic": params.topic, '
    '"consume_queue": params.consume_queue, "index": params.index, "skip_corrupt": params.skip_corrupt, '
    '"force": params.force, "master": params.spark_master} | tojson }}'
)


@task.external_python(python=PROJECT_PYTHON, expect_airflow=False)
def reindex(settings: str) -> dict:
    """The rebuild in the project's interpreter (pyspark and lakemq are imported there)."""
    import json

    from lakemq.jobs.reindex import run_reindex

    return run_reindex(json.loads(settings))


def _params() -> dict[str, Param]:
    params = common_params("store_dir")
    del params["storage_options"]  # the store is local: no lake here
    params["topic"] = Param("", type="string", description="rebuild only this topic's ConsumeQueues")
    params["consume_queue"] = Param(True, type="boolean", description="rebuild the ConsumeQueues")
    params["index"] = Param(True, type="boolean", description="rebuild the IndexFiles (not with a topic)")
    params["skip_corrupt"] = Param(False, type="boolean", description="step over corrupt CommitLog bytes")
    params["force"] = Param(False, type="boolean", description="run although the abort file is present")
    return params


@dag(
    dag_id="lakemq_reindex",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"owner": "lakemq", "retries": 0},
    params=_params(),
    tags=["lakemq"],
    doc_md=__doc__,
)
def lakemq_reindex() -> None:
    reindex(_SETTINGS % DEFAULTS["store_dir"])


lakemq_reindex()
