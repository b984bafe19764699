#!/usr/bin/env bash
# `pip install ./python` against an installed DFI (issue 14 item 4): installs the build into a
# temporary prefix, builds and installs the bindings from a copy of python/ with pip
# (scikit-build-core, find_package(dfi) in the prefix alone) into a temporary directory, checks
# that the module links libdfi statically and names neither tree, and runs a 2-rank NumPy shuffle
# with it under the installed `dfi cluster run`.
#
#   pip_install_test.sh SOURCE_DIR BUILD_DIR VENV
set -euo pipefail
src=$1 build=$2 venv=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dfi-pip-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pip install test: $*" >&2; exit 1; }
run() {
  local log=$1; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "failed: $*"; }
}

P=$tmp/prefix
run "$tmp/install.log" cmake --install "$build" --prefix "$P"
cp -r "$src/python" "$tmp/python"
# The build dependencies (nanobind, scikit-build-core) come from the venv: no download.
export CMAKE_PREFIX_PATH=$P CMAKE_BUILD_PARALLEL_LEVEL=2
run "$tmp/pip.log" "$venv/bin/pip" install --no-build-isolation --no-deps --disable-pip-version-check \
  --target "$tmp/site" "$tmp/python"
module=$(ls "$tmp"/site/dfi/_dfi*.so 2>/dev/null | head -1)
[ -n "$module" ] || fail "pip installed no dfi/_dfi*.so (installed: $(cd "$tmp/site" && find . | head -20))"
[ -f "$tmp/site/dfi/__init__.py" ] || fail "pip installed no dfi/__init__.py"
deps=$(ldd "$module")  # read whole: `ldd | grep -q` under pipefail can fail on SIGPIPE
if grep -q libdfi <<<"$deps"; then fail "the module loads a shared libdfi: $deps"; fi
if grep -qF -e "$build" -e "$src/" "$module"; then fail "the module names the DFI tree"; fi

export PYTHONPATH=$tmp/site
where=$("$venv/bin/python" -c "import dfi; print(dfi.__file__)")
[ "$where" = "$tmp/site/dfi/__init__.py" ] || fail "python imported dfi from $where"
run "$tmp/run.log" "$P/bin/dfi" cluster run --nodes 2 --transport shm --timeout 120 -- \
  "$venv/bin/python" "$src/python/tests/ranks/shuffle_numpy.py" 20000
grep -qF "py-shuffle: 40000 of 40000 rows, key sum 799980000 of 799980000: exactly once" "$tmp/run.log" ||
  { cat "$tmp/run.log" >&2; fail "the shuffle with the pip-installed module did not deliver every row once"; }
echo "pip install test: built with find_package(dfi) from the prefix, 2-rank shuffle exactly once"
