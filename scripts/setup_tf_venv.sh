#!/usr/bin/env bash
# Makes .venv-tf: python3 from PATH with TensorFlow 2.21 (CPU), Keras 3, torch 2.13.0 and jax for
# Keras 3's torch and jax backends, pinned in requirements/tf.txt, and installs a ronde wheel
# built by this venv's python without build isolation, so that CMake sees this TensorFlow and
# builds ronde.tensorflow's compiled kernels into the wheel (frontends/tensorflow; the CMake
# tree stays in build-wheel-tf/, the wheel goes to dist-tf/). Incremental and idempotent. With
# --requirements-only: the venv and its pinned packages, no ronde (scripts/test.sh installs
# those while it compiles).
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

source scripts/ccache_env.sh
echo "setup_tf_venv: building the ronde wheel against this TensorFlow"
rm -rf dist-tf
"$venv/bin/python" -m pip wheel "${pip_quiet[@]}" --no-build-isolation --no-deps \
  -C build-dir=build-wheel-tf -C cmake.define.RONDE_WITH_TENSORFLOW=ON -w dist-tf .
"$venv/bin/python" -m pip install "${pip_quiet[@]}" --force-reinstall --no-deps dist-tf/ronde-*.whl
"$venv/bin/python" - <<'PY'
import jax, keras, tensorflow as tf, torch
import ronde.tensorflow
from ronde.tensorflow import compiled_ops
print("setup_tf_venv: tensorflow %s, keras %s, torch %s, jax %s; ronde.tensorflow's kernels: %s"
      % (tf.__version__, keras.__version__, torch.__version__, jax.__version__,
         "compiled" if compiled_ops.library() else "not loaded"))
PY
