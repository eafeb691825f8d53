#!/usr/bin/env bash
# Installs the clients that tests/clients drives and builds their scenarios; idempotent, quiet and
# quick when everything is already there. Downloads are cached under ~/.cache (Go modules, npm,
# ~/.m2 for Maven); built scenarios go to $CLIENTS_DIR (target/clients by default).
# Env: PY (the venv's python), CLIENTS_DIR.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CLIENTS_DIR="${CLIENTS_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/clients}"
mkdir -p "$CLIENTS_DIR"

# A download that fails once (a registry's hiccup) is tried twice more before the suite fails.
retry() {
  local n
  for n in 1 2 3; do
    "$@" && return 0
    [ "$n" = 3 ] || { echo "install.sh: '$1' failed; trying again in 10 s" >&2; sleep 10; }
  done
  return 1
}

# Debian: Ruby's dalli, PHP's memcached and memcache extensions, Cyrus SASL's sasldb and PLAIN
# modules (the SASL scenario's memcached); Go, Node and Maven where the image lacks them.
missing=""
for p in ruby ruby-dalli php-cli php-memcached php-memcache libsasl2-modules libsasl2-modules-db; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing="$missing golang-go"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
command -v mvn >/dev/null 2>&1 || missing="$missing maven"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
if [ -n "$missing" ]; then
  echo "installing:$missing"
  retry apt-get update -qq && retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# Python clients (and Django, for its cache framework over pylibmc), into the venv.
retry "$PY" -m pip install -q -r "$HERE/requirements.txt"

# Go: gomemcache through the module proxy (pinned in go/go.mod, go.sum), the scenario built.
GO="$(command -v go || echo /usr/local/go/bin/go)"
(cd "$HERE/go" && GOMODCACHE="${GOMODCACHE:-$HOME/.cache/go-mod}" GOFLAGS=-modcacherw retry "$GO" build -o "$CLIENTS_DIR/gomemcache-scenario" .)

# Node: the memcached package from npm into $CLIENTS_DIR/node (npm's cache under ~/.cache/npm).
NODE_MEMCACHED=2.2.2
if ! grep -qs "\"version\": \"$NODE_MEMCACHED\"" "$CLIENTS_DIR/node/node_modules/memcached/package.json"; then
  mkdir -p "$CLIENTS_DIR/node"
  npm_config_cache="$HOME/.cache/npm" retry npm install --prefix "$CLIENTS_DIR/node" --no-save --no-audit --no-fund \
    --loglevel=error "memcached@$NODE_MEMCACHED" >/dev/null
fi

# Java: spymemcached from Maven Central (pinned in java/pom.xml; the local repository under
# ~/.cache/m2), the scenario compiled against it.
JAVA_DIR="$CLIENTS_DIR/java"
if [ ! -f "$JAVA_DIR/lib/spymemcached-2.12.3.jar" ]; then
  retry mvn -q -B -f "$HERE/java/pom.xml" -Dmaven.repo.local="$HOME/.cache/m2" dependency:copy-dependencies \
    -DoutputDirectory="$JAVA_DIR/lib" >/dev/null
fi
if [ ! -f "$JAVA_DIR/classes/Scenario.class" ] || [ "$HERE/java/Scenario.java" -nt "$JAVA_DIR/classes/Scenario.class" ]; then
  javac -d "$JAVA_DIR/classes" -cp "$JAVA_DIR/lib/*" "$HERE/java/Scenario.java"
fi
