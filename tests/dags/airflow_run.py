"""Running Airflow from the tests: it lives in .venv-airflow (scripts/airflow_env.sh), so the
tests drive it through subprocesses with AIRFLOW_HOME and a sqlite database in a tmp dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
INSTALL_TIMEOUT = 900  # a fresh machine downloads ~130 wheels (about a minute here)


def airflow_python() -> str:
    """The .venv-airflow interpreter, installed first when missing (stamped: a no-op after)."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "airflow_env.sh")], capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def airflow_env(home: Path, **variables: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            # Tasks run lakemq with the interpreter running these tests.
            "AIRFLOW_VAR_LAKEMQ_PYTHON": sys.executable,
        }
    )
    env.update({f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()})
    return env


def run_script(python: str, script: str, env: dict[str, str], timeout: float = 600) -> Any:
    """Run ``script`` in Airflow's interpreter; it prints one JSON line last, returned parsed."""
    return run_script_output(python, script, env, timeout)[0]


def run_script_output(python: str, script: str, env: dict[str, str], timeout: float = 600) -> tuple[Any, str]:
    """``run_script``'s answer, and everything the script printed (the tasks' logs)."""
    done = subprocess.run(
        [python, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=env["AIRFLOW_HOME"],
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


def migrate(python: str, env: dict[str, str]) -> None:
    airflow = str(Path(python).with_name("airflow"))
    done = subprocess.run([airflow, "db", "migrate"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


DAGBAG_SCRIPT = """
import json
import os
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag
# As the DAG processor parses the default bundle: its folder is on sys.path.
folder = Path(os.environ['AIRFLOW__CORE__DAGS_FOLDER'])
bag = BundleDagBag(dag_folder=folder, bundle_path=folder)
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": {d.dag_id: {t.task_id: sorted(t.downstream_task_ids) for t in d.tasks}
             for d in bag.dags.values()},
    "params": {d.dag_id: sorted(d.params.keys()) for d in bag.dags.values()},
}))
"""

DAG_TEST_SCRIPT = """
import json
import os
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag
# As the DAG processor parses the default bundle: its folder is on sys.path.
folder = Path(os.environ['AIRFLOW__CORE__DAGS_FOLDER'])
bag = BundleDagBag(dag_folder=folder, bundle_path=folder)
assert not bag.import_errors, bag.import_errors
dag = bag.dags[{dag_id!r}]
run = dag.test(run_conf={run_conf!r})
states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
print(json.dumps({{"state": str(run.state), "tasks": states}}))
"""
