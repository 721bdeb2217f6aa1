#!/usr/bin/env bash
# Builds the LibTorch frontend, its gtest and the C++ digits example against the libtorch
# inside the .venv's PyPI torch (torch.utils.cmake_prefix_path), in build-torch-pip/: the
# same sources that build/ compiles against Debian's libtorch-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh
build=${RONDE_TORCH_PIP_BUILD_DIR:-build-torch-pip}
venv=${RONDE_VENV:-.venv}
prefix=$("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
lib=$("$venv/bin/python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
# TorchConfig.cmake looks for libc10 and libtorch with find_library(... PATHS), which searches
# the system first: with Debian's libtorch-dev installed it would mix Debian's libc10 into a
# pip-torch build (a double free at exit). Name the pip torch's own libraries.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRONDE_BUILD_BENCH=OFF \
  "-DCMAKE_PREFIX_PATH=$prefix" "-Dc10_LIBRARY=$lib/libc10.so" "-DTORCH_LIBRARY=$lib/libtorch.so" \
  >/dev/null
ninja -C "$build" -j "$(nproc)" ronde_cli torch_frontend_test train_digits
