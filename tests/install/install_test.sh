#!/usr/bin/env bash
# DFI used from outside its tree (issue 14): installs the build tree into a temporary prefix,
# builds examples/shuffle from a copy against that prefix only (find_package(dfi)), runs it on
# a 2-rank cluster started by the installed `dfi`, and checks dfi.pc with a program compiled and
# linked through pkg-config alone, and with the static archive through the CMake package.
#
#   install_test.sh SOURCE_DIR BUILD_DIR LIBDIR VERSION [SANITIZE]
set -euo pipefail
src=$1 build=$2 libdir=$3 version=$4 sanitize=${5:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dfi-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix
fail() { echo "install test: $*" >&2; exit 1; }
# run LOG CMD...: runs CMD with its output in LOG, shown if it fails.
run() {
  local log=$1; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "failed ($?): $*"; }
}
# A sanitizer build's libdfi asks its users to link the sanitizer (dfi::dfi, dfi.pc); the
# programs built here are instrumented too, as the tree's own are.
cxxflags=""
case "$sanitize" in
  "") ;;
  address) cxxflags="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  thread)
    cxxflags="-fsanitize=thread"
    # as tests/CMakeLists.txt sets for every TSan test
    export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
    export TSAN_OPTIONS="suppressions=$src/tests/tsan.supp" ;;
  *) fail "unknown sanitizer '$sanitize' (expected '', address or thread)" ;;
esac

# 1. The install: headers, one library (archive, and shared with its SONAME), CLI, CMake
#    package, pkg-config file.
run "$tmp/install.log" cmake --install "$build" --prefix "$P"
major=${version%%.*} rest=${version#*.}
minor=${rest%%.*}
soversion=$([ "$major" = 0 ] && echo "$major.$minor" || echo "$major")
for f in include/dfi/version.hpp include/dfi/flow/shuffle.hpp include/dfi/flow/detail/rings.hpp \
         "$libdir/libdfi.a" "$libdir/libdfi.so.$version" "$libdir/cmake/dfi/dfiConfig.cmake" \
         "$libdir/cmake/dfi/dfiConfigVersion.cmake" "$libdir/pkgconfig/dfi.pc" bin/dfi; do
  [ -e "$P/$f" ] || fail "cmake --install did not install $f (installed outside include/:" \
    "$(cd "$P" && find . -type f -not -path "./include/*" | sort | tr "\n" " "))"
done
[ "$(readlink "$P/$libdir/libdfi.so")" = "libdfi.so.$soversion" ] ||
  fail "libdfi.so does not link to libdfi.so.$soversion"
[ "$(readlink "$P/$libdir/libdfi.so.$soversion")" = "libdfi.so.$version" ] ||
  fail "libdfi.so.$soversion does not link to libdfi.so.$version"
soname=$(readelf -d "$P/$libdir/libdfi.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libdfi.so.$soversion" ] ||
  fail "SONAME of libdfi is '$soname', expected libdfi.so.$soversion"
grep -q "^#define DFI_VERSION_STRING \"$version\"" "$P/include/dfi/version.hpp" ||
  fail "dfi/version.hpp does not say $version"
if grep -rlF -e "$src" -e "$build" "$P/include" "$P/$libdir/cmake" "$P/$libdir/pkgconfig"; then
  fail "installed headers or package files (above) name the source or build tree"
fi

# 2. examples/shuffle, copied out of the tree, configured against the prefix only.
cp -r "$src/examples/shuffle" "$tmp/example"
run "$tmp/configure.log" cmake -S "$tmp/example" -B "$tmp/example-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  -DCMAKE_CXX_FLAGS="$cxxflags"
dfi_dir=$(sed -n 's/^dfi_DIR:PATH=//p' "$tmp/example-build/CMakeCache.txt")
[ "$dfi_dir" = "$P/$libdir/cmake/dfi" ] || fail "find_package(dfi) found '$dfi_dir', not the temporary prefix"
run "$tmp/build.log" cmake --build "$tmp/example-build" -j2
# Every header the example's compile read: none may come from the DFI tree.
if ninja -C "$tmp/example-build" -t deps | grep -F -e "$src" -e "$build"; then
  fail "the example was compiled with headers from the DFI tree (above), not from the prefix"
fi
# ldd's output is read whole before grep looks at it: `ldd | grep -q` under pipefail fails when
# grep stops reading at its match and ldd, still writing, dies of SIGPIPE (seen once in CI).
deps=$(ldd "$tmp/example-build/shuffle")
grep -qF "$P/$libdir/libdfi.so.$soversion" <<<"$deps" ||
  fail "the example does not load libdfi from the prefix: $deps"
run "$tmp/run.log" "$P/bin/dfi" cluster run --nodes 2 --transport shm --timeout 60 -- "$tmp/example-build/shuffle"
grep -qF "DFI $version shuffle: 200000 of 200000 tuples, each exactly once: yes" "$tmp/run.log" ||
  { cat "$tmp/run.log" >&2; fail "the example's shuffle did not report every tuple exactly once"; }

# 3. pkg-config alone: a one-file program compiled and linked with `pkg-config --cflags --libs`,
#    which must point into the prefix.
export PKG_CONFIG_PATH="$P/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs dfi) || fail "pkg-config --cflags --libs dfi failed"
[ "$(pkg-config --modversion dfi)" = "$version" ] || fail "pkg-config --modversion dfi is not $version"
cat >"$tmp/version.cpp" <<'CPP'
#include <cstdio>
#include "dfi/common/error.hpp"
#include "dfi/version.hpp"
int main() {  // a header macro and a function from libdfi
  const std::string_view name = dfi::errc_name(dfi::Errc::timeout);
  std::printf("%s %d %.*s\n", DFI_VERSION_STRING, DFI_VERSION, static_cast<int>(name.size()), name.data());
}
CPP
# shellcheck disable=SC2086  # flags are words
run "$tmp/pkg-config.log" g++ -std=c++20 $cxxflags "$tmp/version.cpp" $flags -Wl,-rpath,"$P/$libdir" -o "$tmp/version"
if grep -F -e "$src" -e "$build" <<<"$flags"; then fail "pkg-config flags name the DFI tree: $flags"; fi
out=$("$tmp/version") || fail "the pkg-config program failed: $out"
expected="$version $((major * 10000 + minor * 100 + ${version##*.})) timeout"
[ "$out" = "$expected" ] || fail "the pkg-config program printed '$out', expected '$expected'"

# 4. The static archive through the CMake package (dfi::dfi_static brings UCX and Threads): the
#    example again, linked with libdfi.a, over tcp.
mkdir "$tmp/static"
cat >"$tmp/static/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(dfi_static_check LANGUAGES CXX)
find_package(dfi CONFIG REQUIRED)
add_executable(shuffle_static $tmp/example/shuffle.cpp)
target_link_libraries(shuffle_static PRIVATE dfi::dfi_static)
CMAKE
run "$tmp/static-configure.log" cmake -S "$tmp/static" -B "$tmp/static-build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON \
  -DCMAKE_CXX_FLAGS="$cxxflags"
run "$tmp/static-build.log" cmake --build "$tmp/static-build"
if ldd "$tmp/static-build/shuffle_static" | grep -F libdfi; then fail "dfi::dfi_static linked the shared libdfi"; fi
run "$tmp/static-run.log" "$P/bin/dfi" cluster run --nodes 2 --transport tcp --timeout 60 -- "$tmp/static-build/shuffle_static"
grep -qF "DFI $version shuffle: 200000 of 200000 tuples, each exactly once: yes" "$tmp/static-run.log" ||
  { cat "$tmp/static-run.log" >&2; fail "the statically linked example did not report every tuple exactly once"; }
echo "install test: ok (example, shared libdfi over shm and static over tcp: every tuple exactly once)"
