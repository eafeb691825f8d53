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

# Debian: Ruby's dalli, PHP's memcached extension; Go, Node and Maven where the image lacks them.
missing=""
for p in ruby-dalli php-cli php-memcached; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing="$missing golang-go"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
command -v mvn >/dev/null 2>&1 || missing="$missing maven"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
if [ -n "$missing" ]; then
  echo "installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# Python clients, into the venv.
"$PY" -m pip install -q -r "$HERE/requirements.txt"
