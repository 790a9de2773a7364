#!/usr/bin/env bash
# Set up what the tests need, then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Delta Lake and the S3 connector for Spark (jvm/spark-lake/pom.xml, fetched by scripts/jvm_deps.sh).
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} spark-lake"
# The console's browser tests drive headless Chromium through chromedriver.
export LAKEMQ_APT_PACKAGES="${LAKEMQ_APT_PACKAGES:-} chromium chromium-driver"
# JVM classpath groups fetched by Maven (scripts/jvm_deps.sh; offline once built): Apache
# RocketMQ's Java client and mqadmin (rocketmq), its NameServer and broker (rocketmq-server),
# and the Java driver of tests/compat (driver). A space-separated list.
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} rocketmq rocketmq-server driver"
source scripts/bootstrap.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# The suite mostly waits on brokers and JVMs, so two pytest-xdist workers share the cores; a
# worker takes whole files (each module's cluster starts once). LAKEMQ_TEST_WORKERS=0 runs it
# in one process.
exec .venv/bin/python -m pytest -n "${LAKEMQ_TEST_WORKERS:-2}" --dist loadfile "$@"
