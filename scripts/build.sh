#!/usr/bin/env bash
# Configures and builds ronde into build/ (or $RONDE_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RONDE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C "$build" -j "$(nproc)"
