#!/usr/bin/env bash
# Makes .venv-cuda with NCCL's wheel (requirements/cuda.txt) and prints where its headers and
# library are, as CMake settings:
#   RONDE_NCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so.2>
# A plain CMake build of this checkout finds .venv-cuda by itself; give -DRONDE_NCCL_ROOT=<dir>
# for any other. CUDA's compiler comes from the toolkit (nvcc on PATH or /usr/local/cuda), not
# from here. Idempotent; needs PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_requirements.sh
venv=${RONDE_CUDA_VENV:-.venv-cuda}
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_cuda_venv: creating $venv with $(command -v python3)" >&2
  python3 -m venv "$venv"
fi
pip_requirements "$venv" requirements/cuda.txt >&2
root=$("$venv/bin/python" - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("nvidia.nccl")
if spec is None or not spec.submodule_search_locations:
    sys.exit("setup_cuda_venv: nvidia.nccl is not importable after the install")
print(os.path.realpath(list(spec.submodule_search_locations)[0]))
PY
)
[ -f "$root/include/nccl.h" ] || { echo "setup_cuda_venv: no $root/include/nccl.h" >&2; exit 1; }
ls "$root"/lib/libnccl.so* >/dev/null || { echo "setup_cuda_venv: no libnccl in $root/lib" >&2; exit 1; }
echo "RONDE_NCCL_ROOT=$root"
echo "NCCL_INCLUDE_DIR=$root/include"
echo "NCCL_LIBRARY_DIR=$root/lib"
