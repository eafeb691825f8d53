# One command runs every test in the repository: `make test`.
# It installs what it needs on a fresh Debian machine (apt-get, a Python venv, pip).
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
CARGO ?= cargo

.PHONY: install test deps venv lint test-rust test-c test-python test-server test-clients test-bench fuzz-build test-restart

test: deps lint test-rust fuzz-build test-c test-python test-server test-clients test-bench test-restart
	@echo "make test: every suite passed"

# Debian packages the suites use: memcached (peer), libmemcached-tools (memccapable),
# nutcracker (twemproxy), valgrind, pkg-config.
deps:
	@missing=""
	for p in memcached libmemcached-tools nutcracker valgrind pkg-config; do
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"
	done
	if [ -n "$$missing" ]; then
	  echo "installing:$$missing"
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null
	fi

venv:
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r tests/requirements.txt

# Formatting (rustfmt.toml) and lints, warnings denied: clippy over every target of the workspace,
# the Python crate and the fuzz targets; undocumented `unsafe` and undocumented public items of the
# library crates are among them (Cargo.toml's [workspace.lints], the crates' lib.rs). No source
# file of a crate imports another that imports it back (.ci/import_cycles.py).
lint:
	python3 .ci/import_cycles.py segcache-core/src segcache-ffi/src segcache-server/src python/src benches/*/src
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path python/Cargo.toml --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings
	CARGO_TARGET_DIR=$(CURDIR)/target/python $(CARGO) clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings

test-rust:
	$(CARGO) test --workspace --release
	# The shard lock's protocol under loom's model checker (its own target dir: other RUSTFLAGS).
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CURDIR)/target/loom $(CARGO) test --release -p segcache-core --lib lock

# cargo-fuzz targets: built (not run) to keep them compiling. See README for running them.
fuzz-build:
	if rustup toolchain list 2>/dev/null | grep -q nightly && cargo +nightly fuzz --version >/dev/null 2>&1; then
	  cd fuzz && cargo +nightly fuzz build
	else
	  $(CARGO) build --manifest-path fuzz/Cargo.toml
	fi

# C library (segcache-ffi + bindings/c): header freshness, C tests plain / valgrind / ASan, the C++
# wrapper's test, the example via pkg-config (shared and static). See docs/c.md.
test-c: deps
	$(MAKE) -C bindings/c test CARGO="$(CARGO)"

# The Python package: build and install it into the venv (maturin, release), then its pytest suite.
test-python: venv
	$(PY) -m pip install -q "maturin>=1.5,<2" -r python/tests/requirements.txt
	PATH="$(abspath $(VENV))/bin:$$PATH" CARGO_TARGET_DIR=$(CURDIR)/target/python $(PY) -m pip install -q --no-build-isolation ./python
	(cd python && $(abspath $(PY)) -m pytest -q -p no:cacheprovider tests)
	CARGO_TARGET_DIR=$(CURDIR)/target/python $(CARGO) test -q --manifest-path python/Cargo.toml

# segcache-server end to end: the release binary against pymemcache, pylibmc, memccapable -a and
# a three-server nutcracker cluster (tests/server/). Its Rust unit tests run in test-rust.
test-server: deps venv
	$(CARGO) build --release -p segcache-server
	SEGCACHE_SERVER_BIN="$${CARGO_TARGET_DIR:-target}/release/segcache-server" $(PY) -m pytest -q tests/server

# Real memcached client libraries (Python, Ruby, PHP, Go, Node, Java; tests/clients/): each runs a
# scripted scenario against memcached and against the release server, and what the user sees must
# match. install.sh installs the clients (apt, pip, Go modules, npm, Maven) and builds the scenarios
# under target/clients.
test-clients: deps venv
	$(CARGO) build --release -p segcache-server
	PY=$(PY) CLIENTS_DIR="$${CARGO_TARGET_DIR:-$(CURDIR)/target}/clients" bash tests/clients/install.sh
	SEGCACHE_SERVER_BIN="$${CARGO_TARGET_DIR:-target}/release/segcache-server" CLIENTS_DIR="$${CARGO_TARGET_DIR:-$(CURDIR)/target}/clients" \
	  $(PY) -m pytest -q -rs -p no:cacheprovider tests/clients

# Load harness (benches/load, docs/load.md): its unit and mock-server tests run in test-rust; here
# a smoke ramp of a few seconds against segcache-server (against memcached while the server does not serve).
test-bench: deps
	$(CARGO) build --release -p segcache-bench
	$(CARGO) build --release -p segcache-server || echo "test-bench: segcache-server does not build; the smoke run uses memcached"
	bash benches/load/smoke.sh

# Warm-restart benchmarks (benches/restart, docs/restart.md): their end-to-end tests (fill, stop
# gracefully or by SIGKILL, reopen in a fresh process, every item back; the compare driver beside
# memcached -e), then a small smoke run of the benchmark script. The full run: benches/restart/run.sh.
test-restart: deps
	$(CARGO) test --release -p segcache-restart-bench
	SIZES=64MiB STEADY_ITEMS=100000 PORT=21988 bash benches/restart/run.sh

# The server binary to $(DESTDIR)$(PREFIX)/bin (docs/server.md, "Install"); `cargo install --path
# segcache-server` does the same into ~/.cargo/bin.
PREFIX ?= /usr/local
install:
	$(CARGO) build --release -p segcache-server
	install -D -m 0755 "$${CARGO_TARGET_DIR:-target}/release/segcache-server" "$(DESTDIR)$(PREFIX)/bin/segcache-server"
