#!/usr/bin/env bash
# Fetch the JVM artifacts of one or more classpath groups. Each group is a Maven project,
# jvm/<group>/pom.xml; its runtime jars are copied to build/jvm/<group>/lib through a Maven
# repository kept in build/jvm/m2, so a re-run needs no network. Jars are never committed
# (build/ is ignored). A group with Java sources of its own (src/main/java beside its pom) is
# also compiled, into build/jvm/<group>/target/classes. The group `driver` is the Java
# compatibility and bench driver, tests/compat/java; `rmq5-driver` the 5.x Java client's, tests/rmq5/java. Usage: bash scripts/jvm_deps.sh GROUP [GROUP ...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
pom_of() {
  case $1 in
    driver) echo tests/compat/java/pom.xml ;;
    rmq5-driver) echo tests/rmq5/java/pom.xml ;;  # RocketMQ's 5.x Java client (gRPC) and its driver
    *) echo "jvm/$1/pom.xml" ;;
  esac
}
for group in "$@"; do
  pom=$(pom_of "$group")
  [ -f "$pom" ] || { echo "jvm_deps: no $pom" >&2; exit 2; }
  src=$(dirname "$pom")/src
  out=$ROOT/build/jvm/$group
  goals=(dependency:copy-dependencies)
  if [ -d "$src" ]; then
    goals=(compile dependency:copy-dependencies)
    want=$( (cat "$pom"; find "$src" -type f | LC_ALL=C sort | xargs cat) | sha256sum | cut -d' ' -f1)
  else
    want=$(sha256sum "$pom" | cut -d' ' -f1)
  fi
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$want" ]; then continue; fi
  echo "jvm_deps: fetching $group into build/jvm/$group (Maven; cached in build/jvm/m2)"
  rm -rf "$out"
  mkdir -p "$out"
  mvn -B -f "$pom" -Dmaven.repo.local="$ROOT/build/jvm/m2" -Dlakemq.build.dir="$out/target" \
    "${goals[@]}" -DincludeScope=runtime -DoutputDirectory="$out/lib" >"$out/mvn.log" 2>&1 \
    || { echo "jvm_deps: Maven could not build $group; see build/jvm/$group/mvn.log" >&2; tail -n 20 "$out/mvn.log" >&2; exit 1; }
  echo "$want" > "$out/.stamp"
done
