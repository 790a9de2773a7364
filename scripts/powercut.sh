#!/usr/bin/env bash
# Power cuts under a real broker whose store is on lazyfs (tests/powercut/broker_cuts.py;
# docs/DURABILITY.md): scripts/powercut.sh [CUTS=100] [SYNC_FLUSH|ASYNC_FLUSH] [SEED=1]
#   [--slave | --slaves 1|2] [--cut all|master|slave]
# (--slaves N: a SYNC_MASTER with N slaves (brokerId 1 and 2), each on a mount of its own;
#  --slave is --slaves 1. --cut all: the cut takes every machine (the default);
#  --cut master: the master's machine alone, its slaves run on; --cut slave: one slave's,
#  at random. master and slave cuts imply one slave at least.)
# Needs /dev/fuse, Debian's fuse and libfuse2, and fusepy (scripts/test.sh installs them).
# The run's files stay in the directory it prints when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
cuts=${1:-100}
flush=${2:-SYNC_FLUSH}
seed=${3:-1}
root=$(mktemp -d "${TMPDIR:-/tmp}/lakemq-powercut.XXXXXX")
echo "power cuts: $cuts under $flush (seed $seed) in $root"
if PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m tests.powercut.broker_cuts \
    --cuts "$cuts" --flush "$flush" --seed "$seed" --root "$root" "${@:4}"; then
  rm -rf "$root"
else
  echo "a check failed; the mount's backing files and the broker's logs are in $root" >&2
  exit 1
fi
