#!/usr/bin/env bash
# Create .venv-airflow: Apache Airflow in its own virtualenv, apart from the project's .venv.
#
# Airflow pins much of what it needs (SQLAlchemy, pydantic, fastapi, ...) and would fight the
# project's pins, so it never goes into .venv. Its tasks run lakemq's code with the project's
# interpreter (@task.external_python in dags/), so this venv needs Airflow and nothing of lakemq.
# The install is pinned by scripts/airflow-constraints.txt and takes about a minute; a stamp
# file makes a second run a no-op. Prints the venv's python path last.
set -euo pipefail
cd "$(dirname "$0")/.."
AIRFLOW_VERSION=3.3.2
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv-airflow
stamp=$VENV/.airflow-installed
want=$( (echo "$AIRFLOW_VERSION"; cat scripts/airflow-constraints.txt) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x "$VENV/bin/airflow" ]; then
  started=$(date +%s)
  echo "airflow_env: installing apache-airflow==$AIRFLOW_VERSION into $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  echo "*" > "$VENV/.gitignore"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -c scripts/airflow-constraints.txt "apache-airflow==$AIRFLOW_VERSION" >&2
  echo "$want" > "$stamp"
  echo "airflow_env: installed in $(( $(date +%s) - started ))s" >&2
fi
echo "$PWD/$VENV/bin/python"
