#!/usr/bin/env bash
# Builds the spymemcached driver of the cluster runs (java/ClusterReader.java) into
# $CLUSTER_JAVA_DIR (target/cluster/java by default); idempotent, and quick once built.
# spymemcached comes from Maven Central through tests/clients/java/pom.xml (the local repository
# under ~/.cache/m2, shared with tests/clients); a JDK and Maven are installed where missing.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${CLUSTER_JAVA_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/cluster/java}"

missing=""
command -v mvn >/dev/null 2>&1 || missing="$missing maven"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
if [ -n "$missing" ]; then
  echo "build_java.sh: installing:$missing" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

if [ ! -f "$OUT/lib/spymemcached-2.12.3.jar" ]; then
  # A registry's hiccup is tried twice more before the build fails.
  for n in 1 2 3; do
    mvn -q -B -f "$ROOT/tests/clients/java/pom.xml" -Dmaven.repo.local="$HOME/.cache/m2" \
      dependency:copy-dependencies -DoutputDirectory="$OUT/lib" >/dev/null && break
    [ "$n" = 3 ] && exit 1
    echo "build_java.sh: mvn failed; trying again in 10 s" >&2
    sleep 10
  done
fi
if [ ! -f "$OUT/classes/ClusterReader.class" ] || [ "$HERE/java/ClusterReader.java" -nt "$OUT/classes/ClusterReader.class" ]; then
  javac -d "$OUT/classes" -cp "$OUT/lib/*" "$HERE/java/ClusterReader.java"
fi
