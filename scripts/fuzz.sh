#!/usr/bin/env bash
# The fuzz job: builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan) in build-fuzz
# and runs each for FUZZ_SECONDS (default 20) from its seed corpus in tests/fuzz/corpus.
# New inputs go to build-fuzz/corpus (not the tree); a crash leaves its input in
# build-fuzz/artifacts and fails the job. Reproduce: build-fuzz/tests/fuzz/<fuzzer> <input>.
# With --build-only it builds the fuzzers and stops (scripts/test.sh compiles while it installs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build-fuzz
seconds=${FUZZ_SECONDS:-20}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")} CCACHE_NOHASHDIR=1
fuzzers=(negotiation_wire_fuzzer tcp_store_protocol_fuzzer secret_handshake_fuzzer
         host_list_fuzzer)

mkdir -p "$build"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DRONDE_FUZZ=ON -DRONDE_BUILD_TESTS=OFF -DRONDE_BUILD_BENCH=OFF \
  -DRONDE_PYTHON_DEVELOP=OFF "${launcher[@]}" >"$build/configure.log" \
  || { cat "$build/configure.log"; exit 1; }
ninja -C "$build" "${fuzzers[@]}"
[ "${1:-}" = --build-only ] && exit 0

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/artifacts"
for fuzzer in "${fuzzers[@]}"; do
  echo "== $fuzzer (${seconds} s)"
  mkdir -p "$build/corpus/$fuzzer"
  "$build/tests/fuzz/$fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$fuzzer-" \
    "$build/corpus/$fuzzer" "tests/fuzz/corpus/$fuzzer" 2>"$build/$fuzzer.log" \
    || { tail -n 60 "$build/$fuzzer.log"; echo "$fuzzer failed: see $build/artifacts"; exit 1; }
  grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$build/$fuzzer.log" | tail -n 2
done
