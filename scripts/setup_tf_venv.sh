#!/usr/bin/env bash
# Makes .venv-tf: python3 from PATH with TensorFlow 2.21 (CPU), Keras 3, torch 2.13.0 and jax for
# Keras 3's torch and jax backends, pinned in requirements/tf.txt, and installs the ronde wheel into
# it. The wheel is dist/ronde-*.whl from scripts/setup_python.sh when it exists (one build
# serves every framework: ronde._core includes no framework header); otherwise this script
# runs setup_python.sh first. Idempotent. With --requirements-only: the venv and its pinned
# packages, no ronde (scripts/test.sh installs those while it compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_requirements.sh
venv=${RONDE_TF_VENV:-.venv-tf}
pip_quiet=(-q --disable-pip-version-check)

if [ ! -x "$venv/bin/python" ]; then
  echo "setup_tf_venv: creating $venv with $(command -v python3)"
  python3 -m venv "$venv"
fi
pip_requirements "$venv" requirements/tf.txt
[ "${1:-}" = --requirements-only ] && exit 0

wheel_is_current() {  # a wheel exists and holds this checkout's TensorFlow frontend
  local wheel
  wheel=$(ls dist/ronde-*.whl 2>/dev/null) || return 1
  python3 -m zipfile -l "$wheel" | grep -q "ronde/tensorflow/__init__.py" || return 1
  [ -z "$(find python/ronde -name '*.py' -newer "$wheel" -print -quit)" ]
}
if ! wheel_is_current; then
  echo "setup_tf_venv: dist/ronde-*.whl missing or older than python/ronde; running setup_python.sh"
  bash scripts/setup_python.sh
fi
wheel=$(ls dist/ronde-*.whl)
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps "$wheel"
"$venv/bin/python" - <<'PY'
import jax, keras, tensorflow as tf, torch
import ronde.tensorflow
print("setup_tf_venv: tensorflow %s, keras %s, torch %s, jax %s"
      % (tf.__version__, keras.__version__, torch.__version__, jax.__version__))
PY
