#!/usr/bin/env bash
# Set up what the tests need, then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
