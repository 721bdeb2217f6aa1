#!/usr/bin/env bash
# The MXNet suite in .venv-mxnet (scripts/setup_mxnet_venv.sh): tests/mxnet at 2 and 3 ranks
# and the Gluon digits example on 2 ranks. Ends with "tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${RONDE_MXNET_VENV:-.venv-mxnet}
if [ ! -x "$venv/bin/python" ]; then
  echo "test_mxnet: $venv is missing; run scripts/setup_mxnet_venv.sh" >&2
  exit 2
fi
passed=0
failed=0
job() {
  local name=$1 limit=$2; shift 2
  echo "test_mxnet: $name"
  if timeout -k 10 "$limit" "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "test_mxnet: $name FAILED" >&2
  fi
}
pytest=("$venv/bin/python" -m pytest -q -p no:cacheprovider tests/mxnet)
job mxnet_np2 300 "$venv/bin/ronde" run -np 2 "${pytest[@]}"
job mxnet_np3 300 "$venv/bin/ronde" run -np 3 "${pytest[@]}"
job mxnet_digits_np2 300 "$venv/bin/ronde" run -np 2 "$venv/bin/python" examples/mxnet_digits.py
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
