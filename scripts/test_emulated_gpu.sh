#!/usr/bin/env bash
# tests/gpu on CUDA and NCCL emulated on the host (tests/emulated_gpu/emulated_gpu.h says how):
# ronde's CUDA host code, the host-staging path and the NCCL backend run, with up to 4 ranks
# on 4 emulated GPUs, on a machine without a GPU. Builds build-emulated-gpu/ (the library and
# tests/gpu only, RONDE_EMULATED_GPU=ON) and runs its tests.
#   --build-only   build, run nothing
# Needs the CUDA toolkit's headers (not nvcc, not a driver) and NCCL's (scripts/setup_cuda_venv.sh
# puts them in .venv-cuda); without the toolkit it says so and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh
build=${RONDE_EMULATED_GPU_BUILD:-build-emulated-gpu}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -f /usr/local/cuda/include/cuda_runtime.h ]; then
  echo "test_emulated_gpu.sh: no CUDA toolkit (nvcc, /usr/local/cuda): nothing to emulate against"
  exit 0
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRONDE_EMULATED_GPU=ON \
  -DRONDE_BUILD_TESTS=OFF -DRONDE_BUILD_GPU_TESTS=ON -DRONDE_BUILD_BENCH=OFF \
  -DRONDE_BUILD_EXAMPLES=OFF -DRONDE_WITH_LIBTORCH=OFF >/dev/null
ninja -C "$build" -j "$(nproc)"
[ "${1:-}" = --build-only ] && exit 0
ctest --test-dir "$build" --output-on-failure --timeout 600 -j 1
