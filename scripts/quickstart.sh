#!/usr/bin/env bash
# The README's first command: installs what ronde needs, builds it, and runs ronde's main job
# on the built-in transport.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
build=${RONDE_BUILD_DIR:-build}
echo "== ronde run -np 2: data-parallel training of an MLP on the digits data set (PyTorch) =="
"$build/src/launcher/ronde" run -np 2 /usr/bin/python3 examples/train_digits.py
echo "== ronde run -np 2: allreduce of 64 MiB over shared memory, result checked =="
"$build/src/launcher/ronde" run -np 2 "$build/examples/allreduce_demo" 64 10
