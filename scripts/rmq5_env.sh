#!/usr/bin/env bash
# Create .venv-rmq5: Apache RocketMQ's official 5.x Python client (rocketmq-python-client,
# gRPC) in its own virtualenv, for the tests of lakemq's gRPC front door (tests/rmq5).
#
# Its import name `rocketmq` is the C++ 4.x client's too (PyPI `rocketmq`, in .venv for the
# remoting compatibility tests), so the two cannot share a venv. The tests run small driver
# scripts with this venv's python (tests/rmq5/rmq5_driver.py). Pinned by
# scripts/rmq5-constraints.txt; a stamp makes a second run a no-op. Prints the python path last.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENT_VERSION=5.1.2
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x /usr/bin/python3.11 ]; then PY=/usr/bin/python3.11
else PY=python3
fi
VENV=.venv-rmq5
stamp=$VENV/.rmq5-installed
want=$( (echo "$CLIENT_VERSION"; cat scripts/rmq5-constraints.txt) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "rmq5_env: installing rocketmq-python-client==$CLIENT_VERSION into $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  echo "*" > "$VENV/.gitignore"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -c scripts/rmq5-constraints.txt "rocketmq-python-client==$CLIENT_VERSION" >&2
  echo "$want" > "$stamp"
fi
echo "$PWD/$VENV/bin/python"
