#!/usr/bin/env bash
# Builds the ronde wheel once and installs that same wheel into two virtual environments:
#   .venv         python3 from PATH with torch 2.13.0 from PyPI (the main environment)
#   .venv-debian  Debian's /usr/bin/python3 with its python3-torch 1.13 (system site-packages)
# One build serves both: ronde._core includes no torch header. Idempotent and incremental
# (the CMake tree of the wheel stays in build-wheel/).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_requirements.sh
source scripts/ccache_env.sh
venv=${RONDE_VENV:-.venv}
debian_venv=${RONDE_DEBIAN_VENV:-.venv-debian}
pip_quiet=(-q --disable-pip-version-check)

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_python: creating $venv with $(command -v python3)"
  python3 -m venv "$venv"
fi
pip_requirements "$venv" requirements/venv.txt

echo "setup_python: building the ronde wheel"
rm -rf dist
"$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-build-isolation --no-deps -w dist .
wheel=$(ls dist/ronde-*.whl)
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
echo "setup_python: $wheel installed in $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"

if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  if [ ! -x "$debian_venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$debian_venv"
  fi
  "$debian_venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
  echo "setup_python: $wheel installed in $debian_venv (torch $("$debian_venv/bin/python" -c 'import torch; print(torch.__version__)'))"
else
  echo "setup_python: /usr/bin/python3 has no torch; $debian_venv not made"
fi
