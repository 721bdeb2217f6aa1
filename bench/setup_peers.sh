#!/bin/bash
# Makes .venv-peers with the strongest CPU collective libraries PyPI serves (Intel's oneCCL,
# MPICH; requirements/peers*.txt) and matplotlib, and builds the benchmark programs against
# them into build-peers/:
#   mpich_bench   bench/mpi_bench.cc with MPICH's mpi.h and libmpi (run under MPICH's hydra)
#   ccl_bench     bench/ccl_bench.cc against oneCCL's C++ API
#   peers.json    the install prefixes, read by bench/run_collectives_bench.py --peers-dir
# Not part of the CMake build or CI. Needs python3-venv and a C++20 compiler (Debian:
# python3-venv g++). Safe to rerun: pip skips what is installed, the programs are rebuilt.
#
#   bench/setup_peers.sh [VENV_DIR [OUT_DIR]]     (default: .venv-peers build-peers)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-peers}
out=${2:-build-peers}
cxx=${CXX:-g++}

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
"${pip[@]}" -r requirements/peers.txt
# MPICH in a prefix of its own: its files and impi-rt's share names (requirements/peers-mpich.txt).
"${pip[@]}" --no-deps --prefix "$venv/mpich" -r requirements/peers-mpich.txt

venv_abs=$(cd "$venv" && pwd)
mpich=$venv_abs/mpich
mkdir -p "$out"
flags=(-std=c++20 -O2 -Wall -Wextra -Ibench)

echo "building $out/mpich_bench against MPICH $("$mpich/bin/mpichversion" --version | awk '{print $NF}')"
"$cxx" "${flags[@]}" -DMPICH_SKIP_MPICXX -I"$mpich/include" bench/mpi_bench.cc bench/harness.cc \
  -o "$out/mpich_bench" -L"$mpich/lib" -lmpi -Wl,-rpath,"$mpich/lib"

echo "building $out/ccl_bench against oneCCL in $venv_abs"
"$cxx" "${flags[@]}" -I"$venv_abs/include" bench/ccl_bench.cc bench/harness.cc \
  -o "$out/ccl_bench" -L"$venv_abs/lib" -lccl -Wl,-rpath,"$venv_abs/lib"

"$venv/bin/python" - "$out/peers.json" "$mpich" "$venv_abs/lib" <<'EOF'
import importlib.metadata as md
import json
import sys

path, mpich_prefix, ccl_lib = sys.argv[1:]
versions = {name: md.version(name) for name in ("oneccl-cpu", "impi-rt", "matplotlib")}
sys.path.insert(0, f"{mpich_prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}"
                   "/site-packages")
versions["mpich"] = md.distribution("mpich").version
with open(path, "w") as f:
    json.dump({"mpich_prefix": mpich_prefix, "ccl_lib": ccl_lib, "versions": versions}, f,
              indent=1)
    f.write("\n")
print(f"{path}: {versions}")
EOF
