#!/usr/bin/env bash
# make -C bindings/c test-install: `make install` into a fresh temporary prefix, then
#  1. the shared library is stripped (no .debug_info, under 2 MB), names its debug file in
#     .gnu_debuglink, and that file (beside it) has the debug info;
#  2. a fully static program (cc -static) links from segcache.pc alone and runs;
#  3. tests/cmake builds through find_package(segcache CONFIG REQUIRED) (shared, static, C++17)
#     and its programs run; a request for a version the package does not satisfy fails;
#  4. `make uninstall` leaves the prefix empty.
# Usage: tests/install_test.sh WORK_DIR   (WORK_DIR is emptied first)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: install_test.sh WORK_DIR}
make=${MAKE:-make}
cc=${CC:-gcc}
cxx=${CXX:-g++}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -n1)
prefix=$work/prefix
lib=$prefix/lib/libsegcache.so.$version

fail() {
    echo "test-install: $*" >&2
    exit 1
}

rm -rf "$work"
mkdir -p "$work"
# STAGED=1: `make test-install` has just staged the library; install must not stage it again.
"$make" -s -C "$here" install PREFIX="$prefix" STAGED=1 >"$work/install.log"

# 1. Stripped, with the debug info kept apart.
size=$(stat -c %s "$lib")
[ "$size" -lt $((2 * 1024 * 1024)) ] || fail "$lib is $size bytes (not stripped?)"
if readelf -S "$lib" | grep -q '\.debug_info'; then fail "$lib has .debug_info"; fi
readelf -S "$lib" | grep -q '\.gnu_debuglink' || fail "$lib has no .gnu_debuglink"
readelf --string-dump=.gnu_debuglink "$lib" | grep -q "libsegcache.so.$version.debug" \
    || fail "$lib's .gnu_debuglink does not name libsegcache.so.$version.debug"
readelf -S "$lib.debug" | grep -q '\.debug_info' || fail "$lib.debug has no .debug_info"
nm -D --defined-only "$lib" | grep -q ' T segcache_open$' || fail "$lib does not export segcache_open"
echo "test-install: libsegcache.so.$version is $size bytes, stripped; debug info in $(basename "$lib").debug ($(stat -c %s "$lib.debug") bytes)"

# 2. A fully static link from the .pc alone.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if pkg-config --static --libs segcache | grep -q -- '-lgcc_s'; then fail "segcache.pc's static libs name -lgcc_s"; fi
# shellcheck disable=SC2046 # pkg-config's flags are meant to split into words
"$cc" -std=c11 -static "$here/examples/example.c" $(pkg-config --static --cflags --libs segcache) \
    -o "$work/example_full_static" 2>"$work/static.err" || { cat "$work/static.err" >&2; fail "cc -static with pkg-config --static --libs segcache failed"; }
if readelf -d "$work/example_full_static" 2>/dev/null | grep -q NEEDED; then fail "example_full_static has NEEDED entries"; fi
"$work/example_full_static" | grep -q 'greeting = "hello from segcache"' || fail "example_full_static did not run"
echo "test-install: cc -static \$(pkg-config --static --libs segcache) links and runs"

# 3. The CMake package.
cmake -S "$here/tests/cmake" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >"$work/cmake.log" 2>&1 \
    || { cat "$work/cmake.log" >&2; fail "cmake configure of tests/cmake failed"; }
grep -q "segcache $version from $prefix/lib/cmake/segcache" "$work/cmake.log" \
    || { cat "$work/cmake.log" >&2; fail "find_package did not find segcache $version under $prefix"; }
cmake --build "$work/cmake" >"$work/cmake-build.log" 2>&1 || { cat "$work/cmake-build.log" >&2; fail "cmake --build failed"; }
for exe in consumer_shared consumer_static consumer_cpp; do
    "$work/cmake/$exe" | grep -q ': ok' || fail "$exe did not run"
done
readelf -d "$work/cmake/consumer_shared" | grep -q "NEEDED.*libsegcache.so.${version%%.*}\]" \
    || fail "consumer_shared does not need libsegcache.so.${version%%.*}"
if readelf -d "$work/cmake/consumer_static" | grep -q libsegcache; then fail "consumer_static needs libsegcache.so"; fi
if cmake -S "$here/tests/cmake" -B "$work/cmake-99" -DCMAKE_PREFIX_PATH="$prefix" -DSEGCACHE_WANT=99.0 \
    >"$work/cmake-99.log" 2>&1; then
    fail "find_package(segcache 99.0) succeeded against $version"
fi
echo "test-install: find_package(segcache CONFIG): shared, static and C++ consumers built and ran; 99.0 refused"

# 4. Uninstall leaves nothing behind.
"$make" -s -C "$here" uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" -mindepth 1)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "test-install: make uninstall left $prefix empty"
