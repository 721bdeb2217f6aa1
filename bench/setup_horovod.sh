#!/usr/bin/env bash
# Benchmark peer only: Horovod 0.28.1 from its PyPI sdist, built with MPI against Debian's
# torch 1.13 (it does not build against torch >= 2.1), in .venv-horovod (Debian's python3
# with system site-packages). Never a dependency of ronde; not run by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RONDE_HOROVOD_VENV:-.venv-horovod}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import horovod.torch" 2>/dev/null; then
  echo "setup_horovod: $venv already has horovod $("$venv/bin/python" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi
# Debian's torch headers include pybind11's, which ronde itself builds without (it takes
# pybind11 from PyPI): without pybind11-dev Horovod's torch extension fails to compile.
if ! dpkg-query -W -f='${Status}' pybind11-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "setup_horovod: installing pybind11-dev (Debian's torch headers need it)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends pybind11-dev >/dev/null
fi
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
# No build isolation: Horovod's setup.py must see Debian's torch (an isolated build would
# build without it, or pull a CUDA torch from PyPI).
"$venv/bin/python" -m pip install -q --disable-pip-version-check "setuptools<70" wheel "cmake==3.31.6"
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS=-j"$(nproc)" \
  "$venv/bin/python" -m pip install -v --no-build-isolation --no-deps --no-binary horovod \
  "horovod==0.28.1" > "$venv/horovod-build.log" 2>&1 || {
    tail -40 "$venv/horovod-build.log"; exit 1; }
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps cloudpickle psutil pyyaml packaging
"$venv/bin/python" -c "import horovod.torch as hvd; print('setup_horovod: horovod', hvd.__version__ if hasattr(hvd, '__version__') else '', 'mpi_built', hvd.mpi_built())"
