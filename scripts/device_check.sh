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
#     staging_gpu.txt       tests/gpu/runtime_staging_gpu_test (RuntimeStagingGpu.*): CUDA tensors
#                           through the runtime, every collective x dtype x op, host-staged with
#                           2 ranks sharing the GPU (host, and auto, which must see that they
#                           share it)
#     nccl_runtime_gpu.txt  the same test's RuntimeNcclGpu.*: on NCCL with 1 rank
#                           (RONDE_GPU_OPERATIONS=nccl), and 2 ranks on the GPU: the error
#     staging_bench.txt     its DISABLED_StagingBench: 64 MiB staged allreduce vs host allreduce
#                           plus the two pinned copies (one JSON line)
#     torch_core.txt        ronde._core compiled here for this machine's Python (pybind11
#                           headers carried in build-device-bin/pybind11), against the carried
#                           libronde
#     torch_staging.txt     tests/gpu/torch_staging_check.py under `ronde run -np 2`: ronde.torch
#                           on CUDA tensors, every collective x dtype x op vs a CPU reference
#     torch_nccl.txt        the same under `ronde run -np 1` with RONDE_GPU_OPERATIONS=nccl
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

pybind_include() {  # pybind11's include folder, from the first python that has it
  local py
  for py in ${RONDE_DEVICE_PYTHON:-} python3 .venv/bin/python; do
    command -v "$py" >/dev/null 2>&1 || [ -x "$py" ] || continue
    "$py" -c "import pybind11; print(pybind11.get_include())" 2>/dev/null && return 0
  done
  [ -d "$bin/pybind11-include" ] && echo "$(pwd)/$bin/pybind11-include" && return 0
  return 1
}

torch_python() {  # the first python with torch that sees a GPU
  local py
  for py in ${RONDE_DEVICE_PYTHON:-} python3 python3.12; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null &&
      echo "$py" && return 0
  done
  return 1
}

# Compiles ronde._core for `$1` (a python) into $2/ronde/, beside a copy of python/ronde and the
# carried libronde: the wheel's layout, for a Python this checkout has no wheel for.
build_python_core() {
  local py=$1 stage=$2 pyinc pybind suffix
  pyinc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  [ -f "$pyinc/Python.h" ] || { echo "no Python.h in $pyinc"; return 1; }
  pybind=$(pybind_include) || { echo "no pybind11 headers"; return 1; }
  suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  rm -rf "$stage" && mkdir -p "$stage/ronde/lib" "$stage/obj"
  cp -r python/ronde/. "$stage/ronde/"
  cp -L "$bin/libronde.so.0" "$stage/ronde/lib/"
  local src pids=() pid
  for src in python/src/*.cc; do
    c++ -O1 -std=c++20 -fPIC -fvisibility=hidden -Iinclude -Isrc -Ipython/src -I"$pyinc" \
      -I"$pybind" -DRONDE_VERSION='"0.1.0"' -c "$src" -o "$stage/obj/$(basename "$src").o" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || return 1; done
  c++ -shared -o "$stage/ronde/_core$suffix" "$stage"/obj/*.o "$stage/ronde/lib/libronde.so.0" \
    -Wl,-rpath,'$ORIGIN/lib' || return 1
  PYTHONPATH="$stage" "$py" -c "import ronde._core as c; print('ronde._core', c.__version__, \
    'cuda_built', c.cuda_built())"
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
    fusion_kernels_bench runtime_staging_gpu_test || return 1
  rm -rf "$bin" && mkdir -p "$bin"
  cp -L "$build"/libronde.so.0 "$build/src/launcher/ronde" "$build"/tests/gpu/batched_copy_gpu_test \
    "$build"/tests/gpu/nccl_communicator_test "$build"/tests/gpu/fusion_kernels_bench \
    "$build"/tests/gpu/runtime_staging_gpu_test "$bin"/
  strip --strip-debug "$bin"/*  # the run tool carries at most 64 MiB
  # pybind11's headers (about 1 MiB), for compiling ronde._core on the device for its Python.
  local pybind
  pybind=$(pybind_include) && cp -r "$pybind" "$bin/pybind11-include"
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
  if timeout 150 "$@" >"$out/$file" 2>&1; then
    if grep -q '^\[==========\] Running 0 tests' "$out/$file"; then  # a filter that matched none
      echo "$name: FAILED (no test ran, see $file)" | tee -a "$summary"
      status=1
      return
    fi
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
step staging staging_gpu.txt "$bin/runtime_staging_gpu_test" --gtest_filter='RuntimeStagingGpu.*'
step nccl-runtime nccl_runtime_gpu.txt "$bin/runtime_staging_gpu_test" \
  --gtest_filter='RuntimeNcclGpu.*'
step staging-bench staging_bench.txt "$bin/runtime_staging_gpu_test" \
  --gtest_also_run_disabled_tests --gtest_filter='DISABLED_StagingBench.*'
grep '^{' "$out/staging_bench.txt" >>"$out/bench.jsonl" 2>/dev/null
if py=$(torch_python); then
  stage=/tmp/ronde-device-python
  if build_python_core "$py" "$stage" >"$out/torch_core.txt" 2>&1; then  # a function: no timeout
    echo "torch-core: passed" | tee -a "$summary"
  else
    echo "torch-core: FAILED (see torch_core.txt)" | tee -a "$summary"
    status=1
  fi
  step torch-staging torch_staging.txt env PYTHONPATH="$stage" RONDE_GPU_OPERATIONS=host \
    "$bin/ronde" run -np 2 "$py" tests/gpu/torch_staging_check.py
  step torch-nccl torch_nccl.txt env PYTHONPATH="$stage" RONDE_GPU_OPERATIONS=nccl \
    "$bin/ronde" run -np 1 "$py" tests/gpu/torch_staging_check.py
else
  echo "torch-staging: FAILED (no python with torch seeing a GPU)" | tee -a "$summary"
  status=1
fi
# A skipped GPU test is a failure here: this machine has the GPU.
if grep -q "SKIPPED" "$out/batched_copy_gpu.txt" "$out/nccl_gpu.txt" "$out/staging_gpu.txt" \
  "$out/nccl_runtime_gpu.txt" \
  2>/dev/null; then
  echo "gpu tests: FAILED (some skipped: no GPU visible?)" | tee -a "$summary"
  status=1
fi
exit $status
