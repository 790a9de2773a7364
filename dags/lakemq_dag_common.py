"""What the lakemq DAGs share: where lakemq's interpreter is and the settings templates.

Airflow runs in its own virtualenv (scripts/airflow_env.sh) and lakemq in the project's, so
tasks are ``@task.external_python`` tasks run by the project's interpreter: Airflow's
process imports nothing of lakemq, pyspark or deltalake, and the two dependency sets never
meet. ``python`` is a templated field, so the interpreter comes from the Airflow Variable
``lakemq_python`` at run time (default: ``.venv/bin/python`` next to this folder).

Settings are Jinja templates rendered when a task runs, never at parse time: a DAG run's
param wins, else the Airflow Variable (``lakemq_store_dir``, ``lakemq_lake_uri``,
``lakemq_broker_name``, ``lakemq_namesrv``), else the default embedded here. Each task gets
them as one JSON string, so dicts and numbers arrive as they were given.
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Param

__all__ = ["DEFAULT_ARGS", "INTERVAL_END_MS", "PROJECT_PYTHON", "common_params", "settings_template"]

_ROOT = Path(__file__).resolve().parents[1]
PROJECT_PYTHON = "{{ var.value.get('lakemq_python', '%s') }}" % (_ROOT / ".venv" / "bin" / "python")

DEFAULTS = {
    "store_dir": "",  # empty: as the broker finds it (broker_conf's storePathRootDir, else ~/lakemq-data)
    "lake_uri": "",  # empty: broker_conf's lakeUri; neither is an error (never a directory of its own choosing)
    "broker_name": "broker-a",
    "namesrv": "127.0.0.1:9876",
}
# What an empty default means, for the params' descriptions.
_EMPTY_MEANS = {
    "store_dir": "the broker_conf storePathRootDir, else ~/lakemq-data",
    "lake_uri": "the broker_conf lakeUri (no lake at all is an error)",
}

DEFAULT_ARGS = {"owner": "lakemq", "retries": 2, "retry_delay": 300}

# Epoch ms of the run's data interval end ('' for a run without one): the steps that depend
# on "now" use it, so re-running an interval repeats the same decisions.
INTERVAL_END_MS = "{{ data_interval_end.int_timestamp * 1000 if data_interval_end else '' }}"


def common_params(*names: str) -> dict[str, Param]:
    """Run params for ``names`` (empty = use the Variable or the default), plus the free-form
    ones every lakemq task takes."""
    params = {
        name: Param("", type="string", description=f"default: Variable lakemq_{name}, else "
                    f"{DEFAULTS[name] or _EMPTY_MEANS[name]}")
        for name in names
    }
    params["conf"] = Param(
        {}, type="object", description="broker.conf keys (camelCase) overriding the defaults"
    )
    params["broker_conf"] = Param("", type="string", description="a broker.conf to read settings from")
    params["storage_options"] = Param(
        {}, type="object", description="lake storage options (object_store keys)"
    )
    params["spark_master"] = Param(
        "", type="string", description="Spark master (default: conf/spark-defaults.conf)"
    )
    return params


def settings_template(*names: str, own: tuple[str, ...] = ()) -> str:
    """A template rendering to the JSON settings object for ``names`` plus the free-form params
    and the DAG's ``own`` params (passed as they are)."""
    fields = [f'"{n}": params.{n} or var.value.get("lakemq_{n}", "{DEFAULTS[n]}")' for n in names]
    fields += [f'"{n}": params.{n}' for n in own]
    fields += [
        '"conf": params.conf',
        '"broker_conf": params.broker_conf',
        '"storage_options": params.storage_options',
        '"master": params.spark_master',
    ]
    return "{{ {" + ", ".join(fields) + "} | tojson }}"
