#!/usr/bin/env bash
# Makes .venv-engines: python3.11 with pyspark, ray, torch 2.13.0, keras (torch backend),
# pyarrow and pandas (requirements/engines.txt), and installs the ronde wheel into it, built
# here the way scripts/setup_python.sh builds it (reusing dist/ronde-*.whl when it is newer
# than every source file). Spark needs Java 17 on PATH (Debian 12: apt-get install
# openjdk-17-jre-headless). Idempotent and incremental. With --requirements-only: the venv and
# its pinned packages, no ronde (scripts/test.sh installs those while it compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_requirements.sh
source scripts/ccache_env.sh
venv=${RONDE_ENGINES_VENV:-.venv-engines}
python=${RONDE_ENGINES_PYTHON:-python3.11}
pip_quiet=(-q --disable-pip-version-check)

if ! command -v java >/dev/null; then
  echo "setup_engines_venv: no java on PATH; Spark needs Java 17 (openjdk-17-jre-headless)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_engines_venv: creating $venv with $(command -v "$python")"
  "$python" -m venv "$venv"
fi
pip_requirements "$venv" requirements/engines.txt
[ "${1:-}" = --requirements-only ] && exit 0

wheel=$(ls dist/ronde-*.whl 2>/dev/null | head -1 || true)
newer=""
if [ -n "$wheel" ]; then
  newer=$(find CMakeLists.txt pyproject.toml src include python -newer "$wheel" -type f \
            -not -name '*.pyc' | head -1)
fi
if [ -z "$wheel" ] || [ -n "$newer" ]; then
  echo "setup_engines_venv: building the ronde wheel"
  rm -rf dist
  "$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-build-isolation --no-deps -w dist .
  wheel=$(ls dist/ronde-*.whl)
fi
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
echo "setup_engines_venv: $wheel installed in $venv ($("$venv/bin/python" -c \
  'import pyspark, ray; print("pyspark", pyspark.__version__, "ray", ray.__version__)'))"
