#!/usr/bin/env bash
# Builds the segcache-server Debian package from this repository with dpkg-deb:
#   bash packaging/debian/build-deb.sh [OUT_DIR]      (default: target/deb)
# and prints the .deb's path. What it holds:
#   /usr/bin/segcache-server                       the release binary, stripped
#   /usr/share/man/man1/segcache-server.1.gz       generated from the server's own clap definitions
#   /lib/systemd/system/segcache-server.service    the service (runs as the segcache user)
#   /etc/segcache/segcache.toml                    the commented config file (a conffile)
#   /usr/share/doc/segcache-server/copyright       the license
# and the maintainer scripts beside this file: postinst makes the segcache user and
# /var/lib/segcache (the heap's file), postrm's purge removes them and /etc/segcache.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "${1:-$root/target/deb}" && cd "${1:-$root/target/deb}" && pwd)
cargo=${CARGO:-cargo}
target=${CARGO_TARGET_DIR:-$root/target}

cd "$root"
"$cargo" build --release --locked -p segcache-server --bin segcache-server --example manpage
version=$("$target/release/segcache-server" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)

stage="$out/segcache-server_${version}_${arch}"
rm -rf "$stage" && mkdir -p "$stage/DEBIAN"

install -D -m 0755 "$target/release/segcache-server" "$stage/usr/bin/segcache-server"
strip --strip-unneeded "$stage/usr/bin/segcache-server"
mkdir -p "$stage/usr/share/man/man1"
"$target/release/examples/manpage" | gzip -9n >"$stage/usr/share/man/man1/segcache-server.1.gz"
install -D -m 0644 "$here/segcache-server.service" "$stage/lib/systemd/system/segcache-server.service"
install -D -m 0644 "$here/segcache.toml" "$stage/etc/segcache/segcache.toml"
install -d "$stage/usr/share/doc/segcache-server"
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: segcache"
    echo
    echo "Files: *"
    echo "License: Apache-2.0"
    echo
    echo "License: Apache-2.0"
    sed -e 's/^$/./' -e 's/^/ /' LICENSE
} >"$stage/usr/share/doc/segcache-server/copyright"
chmod 0644 "$stage/usr/share/doc/segcache-server/copyright"

install -m 0755 "$here/postinst" "$here/prerm" "$here/postrm" "$stage/DEBIAN/"
echo /etc/segcache/segcache.toml >"$stage/DEBIAN/conffiles"

# The newest glibc symbol version the binary needs is the libc6 it depends on.
glibc=$(objdump -T "$stage/usr/bin/segcache-server" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: segcache-server
Version: $version
Architecture: $arch
Maintainer: segcache developers
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: libc6 (>= $glibc), libgcc-s1, passwd
Section: web
Priority: optional
Description: memcached-compatible cache server that stays warm across restarts
 segcache-server speaks memcached 1.6's text, meta and binary protocols on
 the segcache engine (Segcache, NSDI'21): items in fixed-size segments of one
 heap, expiry and eviction a segment at a time. Its heap lives in a file
 under /var/lib/segcache, so a restart, graceful or after a crash of the
 process, serves every item again.
CONTROL

deb="$out/segcache-server_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
rm -rf "$stage"
echo "$deb"
