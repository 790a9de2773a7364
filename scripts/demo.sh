#!/usr/bin/env bash
# Set up, then run lakemq's main job end to end on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
# Delta Lake and the S3 connector for Spark (jvm/spark-lake/pom.xml, fetched by scripts/jvm_deps.sh).
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} spark-lake"
source scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
exec .venv/bin/lakemq demo "$@"
