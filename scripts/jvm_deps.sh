#!/usr/bin/env bash
# Fetch the JVM artifacts of one or more classpath groups. Each group is a Maven project,
# jvm/<group>/pom.xml; its runtime jars are copied to build/jvm/<group>/lib through a Maven
# repository kept in build/jvm/m2, so a re-run needs no network. Jars are never committed
# (build/ is ignored). Usage: bash scripts/jvm_deps.sh GROUP [GROUP ...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
for group in "$@"; do
  pom=jvm/$group/pom.xml
  [ -f "$pom" ] || { echo "jvm_deps: no $pom" >&2; exit 2; }
  out=$ROOT/build/jvm/$group
  want=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$want" ]; then continue; fi
  echo "jvm_deps: fetching $group into build/jvm/$group (Maven; cached in build/jvm/m2)"
  rm -rf "$out"
  mkdir -p "$out"
  mvn -B -q -f "$pom" -Dmaven.repo.local="$ROOT/build/jvm/m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$out/lib" >"$out/mvn.log" 2>&1 \
    || { echo "jvm_deps: Maven could not resolve $group; see build/jvm/$group/mvn.log" >&2; tail -n 20 "$out/mvn.log" >&2; exit 1; }
  echo "$want" > "$out/.stamp"
done
