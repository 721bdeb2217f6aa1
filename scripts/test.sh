#!/usr/bin/env bash
# The README's second command: builds everything and runs every test.
#   1. the ronde wheel, installed into .venv (torch 2.13 from PyPI) and .venv-debian
#      (Debian's torch 1.13): scripts/setup_python.sh
#   2. NCCL's wheel (.venv-cuda) and the CMake tree in build/: C++ unit and multi-process
#      tests, launcher tests, the LibTorch frontend on Debian's libtorch, the CUDA kernels and
#      NCCL backend where nvcc is found (their GPU tests skip without a GPU), and the Python
#      suite + digits example under both venvs (ctest)
#   3. the LibTorch frontend and C++ example against the PyPI torch's libtorch, and tests/gpu
#      on CUDA and NCCL emulated on the host (build-emulated-gpu: NCCL with 3 and 4 ranks)
#   4. a fresh venv doing `pip install .` with pip's isolated build, then a 2-rank job
#   5. the framework and engine suites, each in its own venv: TensorFlow/Keras (.venv-tf),
#      Spark/Ray (.venv-engines), MXNet (.venv-mxnet)
#   6. sanitizers (ASan+UBSan, TSan) and a short libFuzzer run, where their scripts exist
# What needs only throughput overlaps: while 2-3 compile, the frameworks' pinned packages
# install into their venvs and 4's fresh venv installs (pip is one process, on one core).
# Every test runs afterwards, one step at a time, with nothing beside it to stretch its waits.
# Ends with one line "tests: N passed, M failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${RONDE_BUILD_DIR:-build}
passed=0
failed=0
failures=()

# Adds a ctest run's counts from its summary line ("97% tests passed, 2 tests failed out of
# 60", or "100% tests passed out of 60").
count_ctest() {
  local log=$1 name=$2 line total bad
  line=$(grep -E "% tests passed.* out of [0-9]+" "$log" | tail -n 1)
  if [ -z "$line" ]; then
    failed=$((failed + 1)); failures+=("$name (no ctest summary)"); return
  fi
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  bad=0
  if grep -qE "[0-9]+ tests? failed" <<<"$line"; then
    bad=$(sed -E 's/.*, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  fi
  passed=$((passed + total - bad)); failed=$((failed + bad))
  [ "$bad" -eq 0 ] || failures+=("$name: $bad of $total")
}

# Notes how long a step took (since $2, seconds since the epoch), for the table at the end:
# CI has a time limit, and this says where the time goes.
took() {
  timings+=("$(printf '%6d s  %s' $(($(date +%s) - $2)) "$1")")
}

# Runs a suite script that ends with a line "...tests: N passed, M failed" and adds its counts
# (a suite that dies before that line counts as one failure).
suite() {
  local name=$1 log=$logs/suite-$((${#stage_logs[@]} + 1))-$RANDOM.log line began; shift
  echo "== $name"
  began=$(date +%s)
  "$@" 2>&1 | tee "$log"
  took "$name" "$began"
  line=$(grep -E "tests: [0-9]+ passed, [0-9]+ failed" "$log" | tail -n 1)
  if [ -z "$line" ]; then
    failed=$((failed + 1)); failures+=("$name (no summary)"); stage_logs+=("$name|$log")
    return
  fi
  local p f
  p=$(sed -E 's/.*tests: ([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.*, ([0-9]+) failed.*/\1/' <<<"$line")
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -eq 0 ] || { failures+=("$name: $f failed"); stage_logs+=("$name|$log"); }
}

# Runs one check that is a whole script; it counts as one test. Its output is kept, so that
# the end of the run can show why it failed. Returns the script's status.
stage() {
  local name=$1 log status began; shift
  log=$logs/stage-$((${#stage_logs[@]} + 1)).log
  echo "== $name"
  began=$(date +%s)
  "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  took "$name" "$began"
  if [ "$status" -eq 0 ]; then passed=$((passed + 1)); return 0; fi
  failed=$((failed + 1)); failures+=("$name"); stage_logs+=("$name|$log")
  return "$status"
}

# Starts a step in the background (this run starts two, beside the foreground's compiles); its
# output goes to its own log, shown (and the step counted when $2 is "counts") by
# collect_background.
background=()  # "pid|name|log|counts" per step
in_background() {
  local name=$1 counts=$2 log=$logs/background-$((${#background[@]} + 1)).log; shift 2
  (
    began=$(date +%s)
    "$@" >"$log" 2>&1
    echo "$? $(($(date +%s) - began))" >"$log.status"
  ) &
  background+=("$!|$name|$log|$counts")
}

# Waits for the background steps. A counted step is a stage; an uncounted one only prepares
# (a venv's packages): its failure is shown, and the stage that needs its work tries again.
collect_background() {
  local entry pid name log counts status seconds
  for entry in "${background[@]}"; do
    IFS='|' read -r pid name log counts <<<"$entry"
    wait "$pid"
    read -r status seconds <"$log.status"
    timings+=("$(printf '%6d s  %s (in the background)' "$seconds" "$name")")
    echo "== $name (ran in the background, $seconds s)"
    if [ "$counts" = counts ]; then
      cat "$log"
      if [ "$status" -eq 0 ]; then passed=$((passed + 1)); else
        failed=$((failed + 1)); failures+=("$name"); stage_logs+=("$name|$log")
      fi
    elif [ "$status" -ne 0 ]; then
      grep -v "^WARNING: Location" "$log" | tail -n 20
      echo "(exit status $status; the venv stages below install what is missing)"
    fi
  done
  background=()
}

# The TensorFlow, MXNet and Spark/Ray venvs with their pinned packages, ronde not yet in them.
framework_packages() {
  local script status=0
  for script in setup_tf_venv setup_mxnet_venv setup_engines_venv; do
    bash "scripts/$script.sh" --requirements-only || status=1
  done
  return "$status"
}

# The last lines of every failed stage (pip's index warnings left out), just before the
# summary, where a CI report that keeps only a run's end still shows them.
show_failed_stages() {
  local entry
  for entry in "${stage_logs[@]}"; do
    echo "---- why \"${entry%%|*}\" failed (its last lines):"
    grep -v "^WARNING: Location" "${entry#*|}" | tail -n 8
  done
}

logs=$(mktemp -d /tmp/ronde-test.XXXXXX)
stage_logs=()
timings=()
run_began=$(date +%s)
echo "disk at the start: $(df -h --output=avail . | tail -n 1) free"
stage "python wheel into both venvs" bash scripts/setup_python.sh
# NCCL headers and library for the NCCL backend (src/backends/nccl), from PyPI.
stage "NCCL wheel (.venv-cuda)" bash scripts/setup_cuda_venv.sh
in_background "the frameworks' venvs: pinned packages" uncounted framework_packages
in_background "fresh venv: pip install . and a 2-rank job" counts bash scripts/test_fresh_install.sh
stage "CMake build ($build)" bash scripts/build.sh
stage "LibTorch frontend against PyPI torch (build-torch-pip)" bash scripts/build_libtorch_pip.sh
torch_pip_built=$?
stage "emulated GPUs: CUDA and NCCL on the host (build-emulated-gpu)" \
  bash scripts/test_emulated_gpu.sh --build-only
emulated_gpu_built=$?
for script in scripts/sanitizers.sh scripts/fuzz.sh; do
  [ -f "$script" ] && stage "$script --build-only" bash "$script" --build-only
done
collect_background

echo "== ctest ($build)"
ctest_began=$(date +%s)
ctest --test-dir "$build" --output-on-failure --timeout 900 -j 1 2>&1 | tee "$logs/main.log"
count_ctest "$logs/main.log" "ctest $build"
took "ctest ($build)" "$ctest_began"

if [ "$torch_pip_built" -eq 0 ]; then
  ctest --test-dir build-torch-pip --output-on-failure --timeout 900 -j 1 \
    -R "Torch|cc_train_digits" 2>&1 | tee "$logs/torch-pip.log"
  count_ctest "$logs/torch-pip.log" "ctest build-torch-pip"
fi
if [ "$emulated_gpu_built" -eq 0 ] && [ -d build-emulated-gpu ]; then
  began=$(date +%s)
  bash scripts/test_emulated_gpu.sh 2>&1 | tee "$logs/emulated-gpu.log"
  count_ctest "$logs/emulated-gpu.log" "ctest build-emulated-gpu"
  took "ctest (build-emulated-gpu)" "$began"
fi

if stage "TensorFlow/Keras venv (.venv-tf)" bash scripts/setup_tf_venv.sh; then
  suite "TensorFlow/Keras suites" bash scripts/test_tf.sh
fi
if stage "MXNet venv (.venv-mxnet)" bash scripts/setup_mxnet_venv.sh; then
  suite "MXNet suite" bash scripts/test_mxnet.sh
fi
if stage "Spark/Ray venv (.venv-engines)" bash scripts/setup_engines_venv.sh; then
  suite "Spark/Ray suites" bash scripts/test_engines.sh
fi
for script in scripts/sanitizers.sh scripts/fuzz.sh; do
  [ -f "$script" ] && stage "$script" bash "$script"
done

echo "disk at the end: $(df -h --output=avail . | tail -n 1) free"
took "the whole run" "$run_began"
echo "time per step:"
printf '%s\n' "${timings[@]}"
show_failed_stages
rm -rf "$logs"
for failure in "${failures[@]}"; do echo "FAILED: $failure"; done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
