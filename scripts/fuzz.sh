#!/usr/bin/env bash
# Coverage-guided fuzzing of one decoder (docs/FUZZING.md): scripts/fuzz.sh TARGET SECONDS
# [libFuzzer flags]. Targets: fuzz/targets/__init__.py. lakemq's compiled modules are built a
# second time with clang's coverage instrumentation (-fsanitize=fuzzer-no-link) into
# build/fuzz/native, never over the tree's .so files, and loaded from there for the run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags]" >&2; exit 2; fi
target=$1 seconds=$2
shift 2
py=.venv/bin/python
# clang instruments the compiled modules; atheris (a wheel, in the dev dependencies) holds libFuzzer.
if ! command -v clang >/dev/null 2>&1; then
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  echo "fuzz: installing clang (instrumented build of the compiled modules)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
"$py" -c "import atheris" 2>/dev/null || "$py" -m pip install -q -c constraints.txt atheris
native=build/fuzz/native
mkdir -p build/fuzz
# What -fsanitize=fuzzer-no-link instruments, less its stack-depth tracing (whose
# __sancov_lowest_stack atheris' libFuzzer does not export): edge counters, their PC table,
# and comparisons, which libFuzzer mutates towards.
COVERAGE_FLAGS="-fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp"
stamp=$( (echo "$COVERAGE_FLAGS"; cat setup.py lakemq/*/*.pyx lakemq/*/*.pxd) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$native/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "fuzz: building the instrumented compiled modules in $native"
  CC=clang LDSHARED="clang -shared" CFLAGS="$COVERAGE_FLAGS" \
    "$py" setup.py -q build_ext --build-lib "$native" --build-temp build/fuzz/temp --force >build/fuzz/native.log 2>&1 \
    || { echo "fuzz: the instrumented build failed (build/fuzz/native.log)" >&2; exit 1; }
  echo "$stamp" >"$native/.stamp"
fi
exec env PYTHONPATH="$PWD" "$py" -m fuzz.run "$target" "$seconds" --native "$native" "$@"
