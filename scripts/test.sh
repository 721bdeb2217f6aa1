#!/usr/bin/env bash
# Builds ronde and runs every test (C++ unit and multi-process tests, launcher tests, Python).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build=${RONDE_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure --timeout 900 -j 1
