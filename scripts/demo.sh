#!/usr/bin/env bash
# Set up, then run lakemq's main job end to end on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/lakemq demo "$@"
