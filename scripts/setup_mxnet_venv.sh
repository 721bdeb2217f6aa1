#!/usr/bin/env bash
# Makes .venv-mxnet: python3.11 (python3 from PATH) with MXNet 1.9.1 and numpy 1.23.5 from
# PyPI (requirements/mxnet.txt), and the ronde wheel installed into it. The wheel is the one
# scripts/setup_python.sh built in dist/ when it is there, else it is built here (ronde._core
# includes no framework header: one build serves every framework). MXNet's wheel bundles its
# libraries except libgomp1 and libquadmath0 (Debian 12: installed with gcc; apt-get install
# libgomp1 libquadmath0 on a bare machine). Idempotent. With --requirements-only: the venv and
# its pinned packages, no ronde (scripts/test.sh installs those while it compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_requirements.sh
source scripts/ccache_env.sh
venv=${RONDE_MXNET_VENV:-.venv-mxnet}
pip_quiet=(-q --disable-pip-version-check)

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_mxnet_venv: creating $venv with $(command -v python3)"
  python3 -m venv "$venv"
fi
pip_requirements "$venv" requirements/mxnet.txt
[ "${1:-}" = --requirements-only ] && exit 0

wheel=$(ls dist/ronde-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  echo "setup_mxnet_venv: building the ronde wheel"
  "$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-build-isolation --no-deps -w dist .
  wheel=$(ls dist/ronde-*.whl)
fi
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
"$venv/bin/python" -c "import mxnet as mx; mx.nd.ones((2, 2)).asnumpy(); print('setup_mxnet_venv: mxnet', mx.__version__, 'imports and runs')"
echo "setup_mxnet_venv: $wheel installed in $venv"
