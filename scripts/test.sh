#!/usr/bin/env bash
# Set up what the tests need, then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Delta Lake and the S3 connector for Spark (jvm/spark-lake/pom.xml, fetched by scripts/jvm_deps.sh).
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} spark-lake"
# The console's browser tests drive headless Chromium through chromedriver.
export LAKEMQ_APT_PACKAGES="${LAKEMQ_APT_PACKAGES:-} chromium chromium-driver"
source scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/python -m pytest "$@"
