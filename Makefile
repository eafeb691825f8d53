# One command runs every test in the repository: `make test`.
# It installs what it needs on a fresh Debian machine (apt-get, a Python venv, pip).
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
CARGO ?= cargo

.PHONY: install test deps venv lint test-rust test-c python-wheel wheel-venv test-python bench-python test-server test-clients \
        test-bench fuzz-build test-restart test-package test-sdist

test: deps lint doc test-rust fuzz-build test-c test-python test-server test-clients test-bench test-restart test-package test-sdist
	@echo "make test: every suite passed"

# Debian packages the suites use: memcached (peer), libmemcached-tools (memccapable),
# nutcracker (twemproxy), valgrind, pkg-config, cmake (the C library's find_package test), and
# Ruby's dalli and PHP's memcached extension (test_auth.py logs in with them over SASL).
deps:
	@missing=""
	for p in memcached libmemcached-tools nutcracker valgrind pkg-config cmake ruby ruby-dalli php-cli php-memcached; do
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
# file of a crate imports another that imports it back (.ci/import_cycles.py: `use` paths and
# paths in code, through re-exports), the checker's own tests (.ci/test_import_cycles.py) first;
# and no part of segcache-core imports a part above it (.ci/layers.py, whose `--show` lists the
# layers and their modules; tests in .ci/test_layers.py).
lint:
	python3 .ci/test_import_cycles.py
	python3 .ci/import_cycles.py segcache-core/src segcache-ffi/src segcache-server/src python/src benches/*/src
	python3 .ci/test_layers.py
	python3 .ci/layers.py segcache-core/src
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path python/Cargo.toml --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings
	$(CARGO) clippy -p segcache-core --all-targets --release --features serde,async -- -D warnings
	CARGO_TARGET_DIR=$(CURDIR)/target/python $(CARGO) clippy --locked --manifest-path python/Cargo.toml --all-targets -- -D warnings

# The Rust crate's documentation (docs/rust.md): the API reference builds with warnings denied
# (broken links, missing docs), every public item has an example (.ci/doc_examples.py over nightly
# rustdoc's JSON; skipped without a nightly toolchain), the examples of the crate's README and of
# docs/rust.md run, and the crate packages for crates.io. The API examples run in test-rust.
RUSTDOC ?= rustdoc
.PHONY: doc
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p segcache-core --no-deps --features serde,async
	if rustup toolchain list 2>/dev/null | grep nightly >/dev/null; then
	  CARGO_TARGET_DIR=$(CURDIR)/target/nightly cargo +nightly rustdoc -q -p segcache-core --lib --features serde,async -- -Z unstable-options --output-format json
	  python3 .ci/doc_examples.py $(CURDIR)/target/nightly/doc/segcache_core.json
	else
	  echo "doc: no nightly toolchain, so the examples' coverage is not checked"
	fi
	$(CARGO) build --release -p segcache-core --features serde,async
	release="$${CARGO_TARGET_DIR:-$(CURDIR)/target}/release"
	for page in segcache-core/README.md docs/rust.md; do
	  $(RUSTDOC) --edition 2021 --test $$page -L "$$release/deps" --extern segcache_core="$$release/libsegcache_core.rlib"
	done
	$(CARGO) publish --dry-run -p segcache-core --allow-dirty

test-rust:
	$(CARGO) test --workspace --release
	# The optional features (typed keys and values, async loaders): their tests and API examples,
	# and the async example on tokio. Only the crate is rebuilt with them, not its dependents.
	$(CARGO) test --release -p segcache-core --features serde,async --test typed --test typed_async --test async_loader
	$(CARGO) test --release -p segcache-core --features serde,async --doc -- typed:: future::
	$(CARGO) run --release -p segcache-core --features serde,async --example async_loader
	# The shard lock's protocol under loom's model checker (its own target dir: other RUSTFLAGS).
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(CURDIR)/target/loom $(CARGO) test --release -p segcache-core --lib sync::lock::loom_tests
	# Processes sharing one file: the pre-fork example runs its workers and checks what they stored.
	$(CARGO) run --release -p segcache-core --example prefork

# cargo-fuzz targets: built (not run) to keep them compiling. See README for running them.
fuzz-build:
	if rustup toolchain list 2>/dev/null | grep -q nightly && cargo +nightly fuzz --version >/dev/null 2>&1; then
	  cd fuzz && cargo +nightly fuzz build
	else
	  $(CARGO) build --manifest-path fuzz/Cargo.toml
	fi

# C library (segcache-ffi + bindings/c): header freshness, C tests plain / valgrind / ASan, the C++
# wrapper's test (and its #error below C++17), the example via pkg-config (shared and static), and
# install / pkg-config --static / find_package / uninstall into a temporary prefix. See docs/c.md.
test-c: deps
	$(MAKE) -C bindings/c test CARGO="$(CARGO)"

# The Python package as users get it: python-wheel builds the abi3 wheel (CPython 3.10+) with
# maturin, --locked (python/Cargo.lock must be current; pyproject.toml also sets it for pip
# builds), tagged for the oldest glibc Rust supports, 2.17 (manylinux2014: zig links against
# that glibc's symbol versions; maturin's audit refuses a newer symbol). test-python installs that
# wheel file, not the source tree, into a fresh venv, checks `import segcache` comes from its
# site-packages, runs python/tests and a small benchmark run against it, then the crate's cargo
# tests. Where a free-threaded CPython (python3.13t, python3.14t) is on PATH it also builds the
# version-specific wheel for it and runs the threaded tests there with the GIL off; there is
# none on this project's machines (see docs/python.md). MANYLINUX= and ZIG= override the tag.
PYTHON ?= python3
WHEEL_DIR := $(CURDIR)/target/wheels
WHEEL_VENV := $(CURDIR)/target/wheel-venv
MANYLINUX ?= manylinux2014
ZIG ?= --zig
FT_PYTHONS ?= python3.14t python3.13t
MATURIN_BUILD = PATH="$(abspath $(VENV))/bin:$$PATH" CARGO_TARGET_DIR=$(CURDIR)/target/python \
  $(abspath $(VENV))/bin/maturin build --release --locked --compatibility $(MANYLINUX) $(ZIG) -m python/Cargo.toml

python-wheel: venv
	$(PY) -m pip install -q "maturin>=1.5,<2" ziglang
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(MATURIN_BUILD) -o $(WHEEL_DIR)
	wheel=$$(ls $(WHEEL_DIR)/segcache-*.whl)
	echo "python-wheel: $$wheel"
	case "$$(basename "$$wheel")" in
	  *-cp310-abi3-*) ;; *) echo "python-wheel: not an abi3 (cp310) wheel" >&2; exit 1 ;;
	esac
	if [ "$(MANYLINUX)" = manylinux2014 ] && [[ "$$wheel" != *manylinux_2_17_* ]]; then
	  echo "python-wheel: not tagged manylinux_2_17" >&2; exit 1
	fi

# A fresh venv with the wheel, its [test] extra (pytest, hypothesis) and python/tests' requirements
# (also used by bench-python).
wheel-venv: python-wheel
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls $(WHEEL_DIR)/segcache-*.whl)[test]" -r python/tests/requirements.txt
	(cd python && $(WHEEL_VENV)/bin/python -c 'import segcache, sysconfig; f = segcache.__file__; \
	  assert f.startswith(sysconfig.get_paths()["purelib"]), f"segcache imported from {f}, not site-packages"; \
	  print("wheel-venv: segcache", segcache.__version__, "from", f)')

# WHEEL_ALSO: other CPython versions the same abi3 wheel is tested on, each where it runs here (on
# PATH, or a pyenv version): the oldest it claims and the newest on these machines.
WHEEL_ALSO ?= 3.10 3.13
test-python: wheel-venv
	(cd python && $(WHEEL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests)
	$(WHEEL_VENV)/bin/python python/benches/bench.py -n 20000 --only dict segcache
	$(WHEEL_VENV)/bin/python python/benches/bench.py -n 20000 --objects --only dict segcache segcache-bytes pickle
	CARGO_TARGET_DIR=$(CURDIR)/target/python $(CARGO) test -q --locked --manifest-path python/Cargo.toml
	for v in $(WHEEL_ALSO); do
	  py=""
	  if command -v python$$v >/dev/null && python$$v -c '' 2>/dev/null; then py=$$(command -v python$$v)
	  elif command -v pyenv >/dev/null; then py=$$(ls -d "$$(pyenv root)"/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -n1 || true); fi
	  if [ -z "$$py" ]; then echo "test-python: no CPython $$v here: the wheel is not tested on it"; continue; fi
	  echo "test-python: the same wheel on $$py"
	  rm -rf $(WHEEL_VENV)-$$v
	  "$$py" -m venv $(WHEEL_VENV)-$$v
	  $(WHEEL_VENV)-$$v/bin/python -m pip install -q "$$(ls $(WHEEL_DIR)/segcache-*.whl)[test]" -r python/tests/requirements.txt
	  (cd python && $(WHEEL_VENV)-$$v/bin/python -m pytest -q -p no:cacheprovider tests)
	done
	ft=""
	for p in $(FT_PYTHONS); do
	  if command -v $$p >/dev/null && $$p -c 'import sysconfig, sys; sys.exit(not sysconfig.get_config_var("Py_GIL_DISABLED"))'; then ft=$$(command -v $$p); break; fi
	done
	if [ -z "$$ft" ]; then
	  echo "test-python: no free-threaded CPython ($(FT_PYTHONS)) on PATH: the threaded tests ran with the GIL only"
	  exit 0
	fi
	echo "test-python: free-threaded $$ft: its own wheel, threaded tests with PYTHON_GIL=0"
	rm -rf $(WHEEL_DIR)/ft $(WHEEL_VENV)-ft && mkdir -p $(WHEEL_DIR)/ft
	$(MATURIN_BUILD) -i "$$ft" -o $(WHEEL_DIR)/ft
	"$$ft" -m venv $(WHEEL_VENV)-ft
	$(WHEEL_VENV)-ft/bin/python -m pip install -q "$$(ls $(WHEEL_DIR)/ft/segcache-*.whl)[test]"
	(cd python && PYTHON_GIL=0 $(WHEEL_VENV)-ft/bin/python -m pytest -q -p no:cacheprovider tests/test_threads.py tests/test_free_threading.py)

# The Python source distribution (maturin sdist: the package, its tests, and segcache-core's
# sources), installed with pip from the file into a fresh venv, which builds it with cargo
# (python/Cargo.lock, --locked; the target dir of the wheel's builds, so that only what changed is
# compiled again), then python/tests against that install (about half a minute), `python -m
# segcache` among them (tests/test_main.py) and the installed metadata (tests/test_metadata.py).
SDIST_DIR := $(CURDIR)/target/sdist
SDIST_VENV := $(CURDIR)/target/sdist-venv
test-sdist: venv
	$(PY) -m pip install -q "maturin>=1.5,<2"
	rm -rf $(SDIST_DIR) && mkdir -p $(SDIST_DIR)
	$(abspath $(VENV))/bin/maturin sdist -m python/Cargo.toml -o $(SDIST_DIR)
	sdist=$$(ls $(SDIST_DIR)/segcache-*.tar.gz)
	echo "test-sdist: $$sdist"
	rm -rf $(SDIST_VENV)
	$(PYTHON) -m venv $(SDIST_VENV)
	CARGO_TARGET_DIR=$(CURDIR)/target/python MATURIN_PEP517_ARGS=--locked \
	  $(SDIST_VENV)/bin/python -m pip install -q "$$sdist[test]" -r python/tests/requirements.txt
	(cd python && $(SDIST_VENV)/bin/python -c 'import segcache, sysconfig; f = segcache.__file__; \
	  assert f.startswith(sysconfig.get_paths()["purelib"]), f"segcache imported from {f}, not site-packages"')
	$(SDIST_VENV)/bin/python -m segcache
	(cd python && $(SDIST_VENV)/bin/python -m pytest -q -p no:cacheprovider tests)

# python/benches/bench.py against the installed wheel (in wheel-venv, with the peer libraries).
# BENCH_ARGS: e.g. -n 1000000 --repeat 2 (docs/python.md).
BENCH_ARGS ?=
bench-python: wheel-venv
	$(WHEEL_VENV)/bin/python -m pip install -q -r python/benches/requirements.txt
	$(WHEEL_VENV)/bin/python python/benches/bench.py $(BENCH_ARGS)

# segcache-server end to end: the release binary against pymemcache, pylibmc, memccapable -a and
# a three-server nutcracker cluster (tests/server/), and the short rolling restart of a pool
# (test_cluster.py, benches/cluster: its spymemcached driver is built into target/cluster/java).
# Its Rust unit tests run in test-rust.
test-server: deps venv
	$(CARGO) build --release -p segcache-server
	bash benches/cluster/build_java.sh
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
# Then the engine bench `procs` (processes sharing one cache file against threads, docs/benchmarks.md)
# at tiny sizes, a second or so: it checks only that every setup runs and the tables print. And
# `instructions`: callgrind's counts per operation, ours held to benches/engine/budget.txt (more
# than 2% over a budget fails), two peers printed beside them. And `stalls` (the longest single
# operations) in a small heap that evicts.
test-bench: deps
	$(CARGO) build --release -p segcache-bench
	$(CARGO) build --release -p segcache-server || echo "test-bench: segcache-server does not build; the smoke run uses memcached"
	bash benches/load/smoke.sh
	$(CARGO) build --release -p segcache-engine-benches --bin procs
	out=$$("$${CARGO_TARGET_DIR:-target}/release/procs" --items 20000 --ops 100000 --reps 1 --dir "$${TMPDIR:-/tmp}")
	echo "$$out"
	grep -q '^| 50:50 get:set, Zipf 0.99 | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* |$$' <<<"$$out"
	grep -q '^| private anonymous cache each | 2 |' <<<"$$out"
	$(CARGO) build --release -p segcache-engine-benches --bin instructions
	"$${CARGO_TARGET_DIR:-target}/release/instructions" --libs floor,ours-single,ours,quick-cache,lru --budget benches/engine/budget.txt
	# The typed handle's get against the byte get plus decoding (docs/engine-bench.md): a short run.
	$(CARGO) run --release -p segcache-engine-benches --features typed --bin typed -- --keys 20000 --rounds 3
	$(CARGO) build --release -p segcache-engine-benches --bin stalls
	out=$$("$${CARGO_TARGET_DIR:-target}/release/stalls" --heap-mib 8 --segment-kib 256 --keys 10000 --ops 200000)
	echo "$$out"
	grep -q '^| Merge | on | [0-9]* |' <<<"$$out"
	grep -q '^| Fifo | off | [0-9]* |' <<<"$$out"
	grep -q '^| Fifo | ahead | [0-9]* |' <<<"$$out"

# Warm-restart benchmarks (benches/restart, docs/restart.md): their end-to-end tests (fill, stop
# gracefully or by SIGKILL, reopen in a fresh process, every item back; the compare driver beside
# memcached -e), then a small smoke run of the benchmark script. The full run: benches/restart/run.sh.
test-restart: deps
	$(CARGO) test --release -p segcache-restart-bench
	SIZES=64MiB STEADY_ITEMS=100000 PORT=21988 bash benches/restart/run.sh

# Installing as users do (tests/packaging/). The crates package for crates.io (segcache-core, the
# server and the C library's crate together, each built from its packaged files). `cargo install`
# of the server, from the repository and from its packaged crate, serves a client. The server's
# Debian package (packaging/debian/build-deb.sh, docs/server.md "Debian package"), built with
# dpkg-deb, is installed on this machine with dpkg -i, started as its unit's ExecStart says as the
# segcache user, serves a client, stops on SIGTERM, restarts warm, and is purged with nothing left
# behind (needs root, as CI runs).
test-package: deps venv
	# Cargo verifies each crate against the others through a registry in target/package, and
	# keeps what it unpacks from there under CARGO_HOME, keyed by that registry's path only: a
	# copy left by an earlier packaging of the same checkout would be built instead of this one.
	rm -rf "$${CARGO_HOME:-$$HOME/.cargo}"/registry/src/-*/segcache-*
	$(CARGO) package --locked -p segcache-core -p segcache-server -p segcache-ffi --allow-dirty
	deb=$$(bash packaging/debian/build-deb.sh "$${CARGO_TARGET_DIR:-$(CURDIR)/target}/deb" | tail -n1)
	SEGCACHE_DEB="$$deb" CARGO="$(CARGO)" $(PY) -m pytest -q -rs -p no:cacheprovider tests/packaging

# The server binary to $(DESTDIR)$(PREFIX)/bin (docs/server.md, "Install"); `cargo install --path
# segcache-server` does the same into ~/.cargo/bin.
PREFIX ?= /usr/local
install:
	$(CARGO) build --release -p segcache-server
	install -D -m 0755 "$${CARGO_TARGET_DIR:-target}/release/segcache-server" "$(DESTDIR)$(PREFIX)/bin/segcache-server"
