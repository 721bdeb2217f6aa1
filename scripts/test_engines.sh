#!/usr/bin/env bash
# The Spark and Ray tests (tests/spark, tests/ray) in .venv-engines, each suite under a time
# limit. Run scripts/setup_engines_venv.sh first. Prints "engines tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${RONDE_ENGINES_VENV:-.venv-engines}
if [ ! -x "$venv/bin/python" ]; then
  echo "test_engines: $venv is missing; run scripts/setup_engines_venv.sh" >&2
  exit 2
fi
passed=0
failed=0
for suite in tests/spark tests/ray; do
  echo "test_engines: $suite"
  # -p no:cacheprovider: nothing written into the tree; the suites start their own clusters.
  if timeout -k 10 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$suite"; then
    passed=$((passed + 1))
  else
    echo "test_engines: $suite FAILED" >&2
    failed=$((failed + 1))
  fi
done
echo "engines tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
