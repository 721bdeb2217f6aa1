#!/usr/bin/env bash
# TensorFlow and Keras elastic training in .venv-tf (made by scripts/setup_tf_venv.sh), on
# ronde.tensorflow's compiled kernels:
#   tests/tensorflow_elastic/units (the states and callbacks) under `ronde run -np 2`, with
#     tf.keras as Keras 3 and as tf_keras (TF_USE_LEGACY_KERAS=1);
#   tests/tensorflow_elastic/test_tf_elastic_jobs.py: real elastic jobs (a worker killed,
#     2 -> 1; a host added, 1 -> 2) of examples/tensorflow2_elastic_digits.py and
#     examples/keras_elastic_digits.py, each held to a one-process replay in plain TensorFlow.
# Prints one line per job and a closing 'tests: N passed, M failed'; exits non-zero on any
# failure. Every job has a time limit (a hang fails it, never the whole CI).
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${RONDE_TF_VENV:-.venv-tf}
if [ ! -x "$venv/bin/ronde" ]; then
  echo "test_tf_elastic: $venv has no ronde; run scripts/setup_tf_venv.sh first" >&2
  exit 2
fi
export TF_CPP_MIN_LOG_LEVEL=3 PYTHONWARNINGS=ignore::DeprecationWarning
export RONDE_TENSORFLOW_OPS=compiled
# The job tests start `ronde run` themselves: this one (and its workers run this python).
export RONDE_BIN="$venv/bin/ronde"
ronde=("$venv/bin/ronde" run)
py="$venv/bin/python"
pytest=("$py" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning
        -o faulthandler_timeout=240)
passed=0 failed=0
log_dir=$(mktemp -d)

job() {  # job NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local began=$SECONDS
  if timeout "$limit" "$@" >"$log_dir/$name.log" 2>&1; then
    passed=$((passed + 1)); echo "test_tf_elastic: $name passed ($((SECONDS - began)) s)"
  else
    failed=$((failed + 1)); echo "test_tf_elastic: $name FAILED ($((SECONDS - began)) s); its log:"
    grep -v "^\[.\]<stderr>:I0000\|cpu_feature_guard\|To enable the following" \
      "$log_dir/$name.log" | tail -60
  fi
}

job units_keras3_np2 300 env TF_USE_LEGACY_KERAS=0 "${ronde[@]}" -np 2 "${pytest[@]}" \
  tests/tensorflow_elastic/units
job units_tf_keras_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 "${pytest[@]}" \
  tests/tensorflow_elastic/units
# Several workers per test, started and killed by the test: alone, not under `ronde run`.
job elastic_jobs 900 env KERAS_BACKEND=tensorflow "${pytest[@]}" -rs \
  tests/tensorflow_elastic/test_tf_elastic_jobs.py
rm -rf "$log_dir"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
