#!/usr/bin/env bash
# The Debian package (issue 14 item 2): builds it with `cpack -G DEB` from the build tree into a
# temporary directory, checks its control file (name, version, architecture, the Depends that
# dpkg-shlibdeps derived and the explicit ones) and its contents with dpkg-deb -I / -c, then
# unpacks it, checks the library's SONAME link and runs the packaged `dfi --version`.
#
#   deb_test.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dfi-deb-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "deb test: $*" >&2; exit 1; }

cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
arch=$(dpkg --print-architecture)
deb=$tmp/out/dfi_${version}_${arch}.deb
[ -f "$deb" ] || fail "cpack made no $deb (made: $(ls "$tmp/out"))"

# The control file.
control() { dpkg-deb -f "$deb" "$1"; }
[ "$(control Package)" = dfi ] || fail "Package is '$(control Package)', expected dfi"
[ "$(control Version)" = "$version" ] || fail "Version is '$(control Version)', expected $version"
[ "$(control Architecture)" = "$arch" ] || fail "Architecture is '$(control Architecture)'"
depends=$(control Depends)
# dpkg-shlibdeps: the libraries libdfi and dfi link; explicit: what the development files need.
names=$(tr ',' '\n' <<<"$depends" | sed 's/^ *//; s/ .*//')
for dep in libucx0 libc6 libstdc++6 libucx-dev pkg-config; do
  grep -qx "$dep" <<<"$names" ||
    fail "Depends does not name $dep: '$depends'"
done
info=$(dpkg-deb -I "$deb")
grep -q "Description: Data Flow Interface" <<<"$info" || fail "no description: $info"

# The contents: what cmake --install puts under the prefix, under /usr; nothing of the build tree.
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ./usr/bin/dfi ./usr/include/dfi/version.hpp ./usr/include/dfi/flow/shuffle.hpp \
         "./usr/lib/libdfi.so.$version" ./usr/lib/libdfi.a ./usr/lib/cmake/dfi/dfiConfig.cmake \
         ./usr/lib/cmake/dfi/dfiTargets.cmake ./usr/lib/pkgconfig/dfi.pc; do
  grep -qE " $f( |$)" "$tmp/contents" || { cat "$tmp/contents" >&2; fail "the package lacks $f"; }
done
outside=$(grep -vE " \./usr/(bin|include|lib)?/?" "$tmp/contents" || true)
if [ -n "$outside" ]; then
  echo "$outside" >&2
  fail "the package installs outside /usr/{bin,include,lib} (above)"
fi

# The packaged library has its SONAME and the packaged CLI runs.
dpkg-deb -x "$deb" "$tmp/root"
soname=$(readelf -d "$tmp/root/usr/lib/libdfi.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -L "$tmp/root/usr/lib/$soname" ] ||
  fail "the packaged libdfi.so.$version has SONAME '$soname' and no symlink of that name"
out=$(LD_LIBRARY_PATH="$tmp/root/usr/lib" "$tmp/root/usr/bin/dfi" --version) ||
  fail "the packaged dfi --version failed: $out"
grep -qF "$version" <<<"$out" || fail "the packaged dfi --version says '$out', not $version"
echo "deb test: $(basename "$deb"): Depends: $depends; $(wc -l <"$tmp/contents") entries"
