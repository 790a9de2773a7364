#!/usr/bin/env bash
# Prepare a fresh Debian machine with Python 3.11: Java 17 when missing, a C compiler and
# Python's headers when missing, a virtualenv in .venv with the pinned packages, lakemq installed
# (and its store extension compiled) in it. Safe to run again; it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# The interpreter: $PYTHON if set, else Debian's own python3.11, else python3.11 or python3 on
# the PATH. Debian builds CPython with profile-guided and link-time optimisation, as the
# official Docker images do; an interpreter built without them (pyenv's default) costs
# lakemq's broker and clients about a fifth more CPU per message (BENCHMARKS.md, Peers).
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x /usr/bin/python3.11 ]; then PY=/usr/bin/python3.11
elif command -v python3.11 >/dev/null 2>&1; then PY=python3.11
else PY=python3
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
apt_install() {
  if [ $apt_updated = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  echo "bootstrap: installing Java 17 (Spark needs a JVM)"
  apt_install openjdk-17-jre-headless
fi
# Maven fetches the JVM groups named in LAKEMQ_JVM_GROUPS (scripts/jvm_deps.sh); javac builds
# the Java test driver.
if [ -n "${LAKEMQ_JVM_GROUPS:-}" ] && { ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; }; then
  echo "bootstrap: installing Maven and the Java 17 compiler"
  apt_install maven openjdk-17-jdk-headless
fi
if [ -n "${LAKEMQ_APT_PACKAGES:-}" ]; then
  missing=()
  for pkg in $LAKEMQ_APT_PACKAGES; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then echo "bootstrap: installing ${missing[*]}"; apt_install "${missing[@]}"; fi
fi

# The compiled parts (lakemq/*/*.pyx) are built on install: a C compiler and
# Python's headers must be there.
has_python_h() {
  "$PY" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}
if ! command -v cc >/dev/null 2>&1 || ! has_python_h; then
  echo "bootstrap: installing a C compiler and Python headers (lakemq's compiled modules)"
  apt_install gcc libc6-dev python3-dev
fi

# A .venv made by another interpreter is made again (its compiled modules are that one's).
real_executable() { "$1" -c 'import os, sys; print(os.path.realpath(sys.executable))'; }
if [ -x .venv/bin/python ] && [ "$(sed -n 's/^executable = //p' .venv/pyvenv.cfg)" != "$(real_executable "$PY")" ]; then
  echo "bootstrap: .venv was made by another interpreter; making it again with $(real_executable "$PY")"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    apt_install python3-venv
    rm -rf .venv
    "$PY" -m venv .venv
  fi
fi
stamp=.venv/.lakemq-installed
# A changed .pyx or .pxd (or the build script) also means a rebuild: pip install -e compiles them again.
want=$(cat pyproject.toml constraints.txt setup.py lakemq/*/*.pyx lakemq/*/*.pxd | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing pinned Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,bench]"
  echo "$want" > "$stamp"
fi
# RocketMQ 5's gRPC code (apache.rocketmq.v2, lakemq/grpc/_pb/) is generated from the official
# definitions, never committed: the official Python client's wheel is downloaded once into
# build/grpc/ (offline after) and grpc_tools.protoc runs on its descriptors (scripts/gen_grpc.py).
.venv/bin/python scripts/gen_grpc.py
# lakemq's Spark Connect client (lakemq/jobs/connect_client.py) uses message classes generated the
# same way, from the .proto files in the spark-connect jar pyspark installs (offline).
.venv/bin/python scripts/gen_spark_connect.py
# An editable install leaves lakemq's modules uncompiled, and where PYTHONDONTWRITEBYTECODE is
# set no process caches its bytecode: every broker, NameServer and tool would compile them again
# at start (a broker's imports 0.7 s instead of 0.4). Compile them as pip does for a regular
# install; up-to-date ones are skipped, and a module edited since is compiled in memory as usual.
.venv/bin/python -m compileall -q -j 0 lakemq >/dev/null
# Spark starts its Python workers (and a stream's planner) with pyspark.zip first on the path,
# which the wheel ships as sources: each of them compiled pyspark again (about 1 s of CPU).
.venv/bin/python scripts/compile_pyspark_zip.py
export PATH="$ROOT/.venv/bin:$PATH"
if [ -n "${LAKEMQ_JVM_GROUPS:-}" ]; then
  # shellcheck disable=SC2086  # a space-separated list of group names
  bash scripts/jvm_deps.sh $LAKEMQ_JVM_GROUPS
  # Spark jobs start faster from a class-data-sharing archive of the driver's classes
  # (lakemq/jobs/class_archive.py); dumped once per JVM and jar set.
  case " $LAKEMQ_JVM_GROUPS " in *" spark-lake "*) .venv/bin/python -m lakemq.jobs.class_archive ;; esac
fi
