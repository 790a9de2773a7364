#!/usr/bin/env bash
# Set up what the tests need, then run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Delta Lake and the S3 connector for Spark (jvm/spark-lake/pom.xml, fetched by scripts/jvm_deps.sh).
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} spark-lake"
# The console's browser tests drive headless Chromium through chromedriver.
export LAKEMQ_APT_PACKAGES="${LAKEMQ_APT_PACKAGES:-} chromium chromium-driver"
# The power-cut tests (tests/powercut): lazyfs runs on FUSE through fusepy, which loads
# libfuse2 and unmounts with its fusermount (fuse); the directory-fsync test reads strace.
export LAKEMQ_APT_PACKAGES="${LAKEMQ_APT_PACKAGES:-} fuse libfuse2 strace"
# JVM classpath groups fetched by Maven (scripts/jvm_deps.sh; offline once built): Apache
# RocketMQ's Java client and mqadmin (rocketmq), its NameServer and broker (rocketmq-server),
# the Java driver of tests/compat (driver), and RocketMQ's 5.x Java client with its driver
# (rmq5-driver, tests/rmq5/java), and Apache Kafka's broker (kafka, the peer of
# tests/bench/test_kafka_peer.py). A space-separated list.
export LAKEMQ_JVM_GROUPS="${LAKEMQ_JVM_GROUPS:-} rocketmq rocketmq-server driver rmq5-driver kafka"
# The DAG tests' Airflow venv (scripts/airflow_env.sh, a no-op once installed) installs beside
# the project's set-up instead of inside the first DAG test. If it fails here (say, before the
# set-up has installed python3-venv), that test installs it again and shows the error.
mkdir -p build
bash scripts/airflow_env.sh >build/airflow_env.log 2>&1 &
airflow_setup=$!
# The gRPC front door's judge, Apache's 5.x Python client, in .venv-rmq5 (scripts/rmq5_env.sh;
# its `rocketmq` package would clash with the C++ client's in .venv). tests/rmq5 installs it
# again, showing the error, if it fails here.
bash scripts/rmq5_env.sh >build/rmq5_env.log 2>&1 &
rmq5_setup=$!
# The Python set-up first, so that pytest can rewrite the test modules' asserts beside the JVM
# set-up: each worker does that for ~260 modules (13 s here) when it collects, and caches the
# result only where bytecode may be written (not under PYTHONDONTWRITEBYTECODE). Filled once
# here, the cache serves both workers.
jvm_groups=$LAKEMQ_JVM_GROUPS
LAKEMQ_JVM_GROUPS=""
source scripts/bootstrap.sh
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider "$@" \
  >build/collect.log 2>&1 &
collect=$!
LAKEMQ_JVM_GROUPS=$jvm_groups
source scripts/bootstrap.sh
wait "$collect" || echo "test.sh: collecting ahead failed (build/collect.log); the workers collect as usual"
wait "$rmq5_setup" || echo "test.sh: .venv-rmq5 did not install now (build/rmq5_env.log); tests/rmq5 will try again"
wait "$airflow_setup" || echo "test.sh: the Airflow venv did not install now (build/airflow_env.log); the DAG tests will try again"
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
# The suite mostly waits on brokers and JVMs, so two pytest-xdist workers share the cores; a
# worker takes whole files (each module's cluster starts once), slow modules first
# (tests/conftest.py orders them; xdist would otherwise put the files with the fewest tests,
# the longest ones here, last). LAKEMQ_TEST_WORKERS=0 runs it in one process. The slowest
# tests are listed at the end, to keep the suite's time in view.
exec .venv/bin/python -m pytest -n "${LAKEMQ_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "$@"
