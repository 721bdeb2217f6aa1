#!/usr/bin/env bash
# The TensorFlow and Keras suites in .venv-tf (made by scripts/setup_tf_venv.sh), on
# ronde.tensorflow's compiled kernels (RONDE_TENSORFLOW_OPS=compiled: a wheel without them
# fails at import) but for one job on its tf.numpy_function path (=python):
#   tests/tensorflow (TF1 graph mode, TF2 eager and tf.function; Horovod's test cases in every
#   mode) under `ronde run -np 2`, `-np 3` and `-np 4`, and on the numpy path `-np 2`,
#   tests/tensorflow_keras under Keras 3 and under tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1),
#   tests/tensorflow_keras_graph (tf_keras in TF1 graph mode),
#   tests/keras on the tensorflow backend (-np 2 and -np 3), the torch and jax backends (-np 2),
#   the examples on 2 ranks: tensorflow1_digits.py (MonitoredTrainingSession),
#   tensorflow2_digits.py, tf_keras_digits.py (eager and --graph) and keras_digits.py (all
#   three backends), and the TF/Keras elastic suites: tests/tensorflow_elastic/units under
#   Keras 3 and tf_keras (-np 2), and tests/tensorflow_elastic/test_tf_elastic_jobs.py, which
#   starts its own elastic jobs (workers killed and added) and so runs outside `ronde run`.
# Prints one line per job and a closing 'tests: N passed, M failed'; exits non-zero on any
# failure. Every job has a time limit (a hang fails it, never the whole CI), and a request that
# some ranks never join stops the runtime after 120 s (RONDE_STALL_SHUTDOWN_TIME_SECONDS), so
# that the job's log says which request waited on which rank.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${RONDE_TF_VENV:-.venv-tf}
if [ ! -x "$venv/bin/ronde" ]; then
  echo "test_tf: $venv has no ronde; run scripts/setup_tf_venv.sh first" >&2
  exit 2
fi
export TF_CPP_MIN_LOG_LEVEL=3 PYTHONWARNINGS=ignore::DeprecationWarning
export RONDE_TENSORFLOW_OPS=compiled RONDE_STALL_SHUTDOWN_TIME_SECONDS=120
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
    passed=$((passed + 1)); echo "test_tf: $name passed ($((SECONDS - began)) s)"
  else
    failed=$((failed + 1)); echo "test_tf: $name FAILED ($((SECONDS - began)) s); its log:"
    grep -v "^\[.\]<stderr>:I0000\|cpu_feature_guard\|To enable the following" \
      "$log_dir/$name.log" | tail -60
  fi
}

job tensorflow_np2 400 "${ronde[@]}" -np 2 "${pytest[@]}" tests/tensorflow
job tensorflow_np3 500 "${ronde[@]}" -np 3 "${pytest[@]}" tests/tensorflow
job tensorflow_np4 600 "${ronde[@]}" -np 4 "${pytest[@]}" tests/tensorflow
job tensorflow_numpy_path_np2 400 env RONDE_TENSORFLOW_OPS=python "${ronde[@]}" -np 2 \
  "${pytest[@]}" tests/tensorflow
job tensorflow_keras3_np2 300 "${ronde[@]}" -np 2 "${pytest[@]}" tests/tensorflow_keras
job tensorflow_tf_keras_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 "${pytest[@]}" \
  tests/tensorflow_keras
job tensorflow_tf_keras_graph_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 \
  "${pytest[@]}" tests/tensorflow_keras_graph
job keras_tensorflow_np2 300 env KERAS_BACKEND=tensorflow "${ronde[@]}" -np 2 "${pytest[@]}" tests/keras
job keras_tensorflow_np3 300 env KERAS_BACKEND=tensorflow "${ronde[@]}" -np 3 "${pytest[@]}" tests/keras
job keras_torch_np2 300 env KERAS_BACKEND=torch "${ronde[@]}" -np 2 "${pytest[@]}" tests/keras
job keras_jax_np2 300 env KERAS_BACKEND=jax "${ronde[@]}" -np 2 "${pytest[@]}" tests/keras
job tensorflow1_digits_np2 300 "${ronde[@]}" -np 2 "$py" examples/tensorflow1_digits.py \
  --checkpoint-dir "$log_dir/tf1_checkpoints"
job tensorflow2_digits_np2 300 "${ronde[@]}" -np 2 "$py" examples/tensorflow2_digits.py --epochs 15
job tf_keras_digits_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 "$py" \
  examples/tf_keras_digits.py --epochs 15 --checkpoint "$log_dir/tfk.h5"
job tf_keras_digits_graph_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 "$py" \
  examples/tf_keras_digits.py --epochs 15 --graph --checkpoint "$log_dir/tfk_graph.h5"
job keras_digits_tensorflow_np2 300 env KERAS_BACKEND=tensorflow "${ronde[@]}" -np 2 "$py" \
  examples/keras_digits.py --epochs 15 --checkpoint "$log_dir/kd_tf.keras"
job keras_digits_torch_np2 300 env KERAS_BACKEND=torch "${ronde[@]}" -np 2 "$py" \
  examples/keras_digits.py --epochs 15 --checkpoint "$log_dir/kd_torch.keras"
job keras_digits_jax_np2 300 env KERAS_BACKEND=jax "${ronde[@]}" -np 2 "$py" \
  examples/keras_digits.py --epochs 15 --checkpoint "$log_dir/kd_jax.keras"
job elastic_units_keras3_np2 300 env TF_USE_LEGACY_KERAS=0 "${ronde[@]}" -np 2 "${pytest[@]}" \
  tests/tensorflow_elastic/units
job elastic_units_tf_keras_np2 300 env TF_USE_LEGACY_KERAS=1 "${ronde[@]}" -np 2 \
  "${pytest[@]}" tests/tensorflow_elastic/units
job elastic_jobs 900 env KERAS_BACKEND=tensorflow RONDE_BIN="$venv/bin/ronde" "${pytest[@]}" \
  -rs tests/tensorflow_elastic/test_tf_elastic_jobs.py
rm -rf "$log_dir"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
