#!/usr/bin/env bash
# The GPU checks of issue 13, as one script for the lent GPU machine (one H200, 16 cores, no
# network; Python 3.12 with torch 2.11 for CUDA 13 and NCCL's wheel, CMake, ninja). Under 8 min.
#
#   scripts/device_check.sh prepare   on a developer's machine (nvcc, GTest, .venv-cuda from
#                                     scripts/setup_cuda_venv.sh): builds build-device/ (Release,
#                                     sm_90, CUDA + NCCL, MPI and LibTorch off: nothing the lent
#                                     machine lacks) and copies what runs into build-device-bin/
#                                     (a few MiB): carry build-device-bin to the device.
#   scripts/device_check.sh           on the device: builds build-device/ itself when
#                                     build-device-bin/ is missing and nvcc is there, then runs,
#                                     writing under $OUT:
#     nvidia-smi.txt        the GPU and driver
#     check-build.txt       `ronde check-build`: CUDA and NCCL ticked, NCCL's version
#     batched_copy_gpu.txt  tests/gpu/batched_copy_gpu_test: every conversion vs the host reference
#     nccl_gpu.txt          tests/gpu/nccl_communicator_test: a world of one rank, every
#                           collective x type x op vs host values; a rank that never joins
#                           (timeout + ncclCommAbort naming rank and host); abort
#     bench.txt, bench.jsonl  tests/gpu/fusion_kernels_bench: pack/unpack 200 x 16 KiB, scale and
#                           cast bandwidth vs a device-to-device copy, pinned H2D/D2H
#     summary.txt           one line per step: passed / FAILED
# NCCL will not run two ranks on one GPU, so multi-rank NCCL runs are not part of this check.
# Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RONDE_DEVICE_BUILD:-build-device}
bin=${RONDE_DEVICE_BIN:-build-device-bin}

nccl_root() {  # the NCCL wheel's folder, from the first python that has it
  local py
  for py in ${RONDE_DEVICE_PYTHON:-} python3 python3.12 .venv-cuda/bin/python; do
    command -v "$py" >/dev/null 2>&1 || [ -x "$py" ] || continue
    "$py" - <<'PY' 2>/dev/null && return 0
import importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
print(os.path.realpath(list(spec.submodule_search_locations)[0]))
PY
  done
  return 1
}

configure_and_build() {
  local root
  root=$(nccl_root) || { echo "device_check: no nvidia-nccl wheel found" >&2; return 1; }
  [ -f scripts/ccache_env.sh ] && source scripts/ccache_env.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DRONDE_WITH_CUDA=ON -DRONDE_WITH_NCCL=ON -DRONDE_NCCL_ROOT="$root" -DRONDE_WITH_MPI=OFF \
    -DRONDE_WITH_LIBTORCH=OFF -DRONDE_BUILD_TESTS=OFF -DRONDE_BUILD_GPU_TESTS=ON \
    -DRONDE_BUILD_BENCH=OFF -DRONDE_BUILD_EXAMPLES=OFF >/dev/null || return 1
  ninja -C "$build" -j"$(nproc)" ronde ronde_cli batched_copy_gpu_test nccl_communicator_test \
    fusion_kernels_bench || return 1
  rm -rf "$bin" && mkdir -p "$bin"
  cp -L "$build"/libronde.so.0 "$build/src/launcher/ronde" "$build"/tests/gpu/batched_copy_gpu_test \
    "$build"/tests/gpu/nccl_communicator_test "$build"/tests/gpu/fusion_kernels_bench "$bin"/
  strip --strip-debug "$bin"/*  # the run tool carries at most 64 MiB
}

if [ "${1:-}" = "prepare" ]; then
  configure_and_build || exit 1
  du -sh "$bin"
  exit 0
fi

out=${OUT:-/tmp/ronde-device-check}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
status=0
step() {  # step NAME FILE COMMAND...: runs with a time limit, records passed / FAILED
  local name=$1 file=$2
  shift 2
  if timeout 240 "$@" >"$out/$file" 2>&1; then
    echo "$name: passed" | tee -a "$summary"
  else
    echo "$name: FAILED (exit $?, see $file)" | tee -a "$summary"
    status=1
  fi
}

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/nvidia-smi.txt"
if [ ! -x "$bin/nccl_communicator_test" ]; then
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    if configure_and_build >"$out/build.txt" 2>&1; then
      echo "build: passed" | tee -a "$summary"
    else
      echo "build: FAILED (see build.txt)" | tee -a "$summary"
      exit 1
    fi
  else
    echo "build: FAILED (no $bin/ carried and no nvcc here: run 'scripts/device_check.sh prepare' first)" |
      tee -a "$summary"
    exit 1
  fi
fi
# The prepared binaries' RUNPATH names the developer's folders; here libronde is in $bin and
# NCCL is the machine's wheel.
export LD_LIBRARY_PATH="$(pwd)/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if root=$(nccl_root); then export LD_LIBRARY_PATH="$root/lib:$LD_LIBRARY_PATH"; fi
step check-build check-build.txt "$bin/ronde" check-build --python /bin/false
step batched-copy batched_copy_gpu.txt "$bin/batched_copy_gpu_test"
step nccl nccl_gpu.txt "$bin/nccl_communicator_test"
step bench bench.txt "$bin/fusion_kernels_bench" "$out/bench.jsonl"
# A skipped GPU test is a failure here: this machine has the GPU.
if grep -q "SKIPPED" "$out/batched_copy_gpu.txt" "$out/nccl_gpu.txt" 2>/dev/null; then
  echo "gpu tests: FAILED (some skipped: no GPU visible?)" | tee -a "$summary"
  status=1
fi
exit $status
