#!/usr/bin/env bash
# Configures and builds ronde's CMake tree (C++ core, launcher, tests, benchmarks, examples,
# the LibTorch frontend against Debian's libtorch) into build/ (or $RONDE_BUILD_DIR). The
# Python tests it registers run against the venvs of scripts/setup_python.sh, when present.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh
build=${RONDE_BUILD_DIR:-build}
pythons=()
for venv in .venv .venv-debian; do
  [ -x "$venv/bin/python" ] && [ -x "$venv/bin/ronde" ] && pythons+=("$PWD/$venv/bin/python")
done
test_pythons=$(IFS=';'; echo "${pythons[*]:-}")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DRONDE_TEST_PYTHONS=$test_pythons" "$@" >/dev/null
ninja -C "$build" -j "$(nproc)"
