#!/usr/bin/env bash
# Builds everything (library, program, tests, benchmarks) with warnings as errors and runs the
# whole test suite. `scripts/test.sh --sanitize` does the same under ASan + UBSan in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
build=build
flags=(-DCMAKE_BUILD_TYPE=Release -DSQUEEZEKV_WERROR=ON)
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSQUEEZEKV_WERROR=ON -DSQUEEZEKV_SANITIZE=ON
         -DSQUEEZEKV_BUILD_BENCHMARKS=OFF)
fi
cmake -S . -B "$build" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
