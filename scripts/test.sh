#!/usr/bin/env bash
# Builds everything (library, program, tests, benchmarks) with warnings as errors and runs the
# whole test suite: GoogleTest, the C API's C tests, pytest on the Python module (build/python), and
# the install test. `scripts/test.sh --sanitize` does the same under ASan + UBSan in build-asan/
# (without the Python module, which cannot load the sanitizer runtime), then the tests that use
# threads (the thread pool, a prompt's activations quantised over it, a cache shared by threads,
# the server) under ThreadSanitizer in build-tsan/, where only those test programs are built.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/check_format.sh  # .clang-format's style, before the long build
build=build
flags=(-DCMAKE_BUILD_TYPE=Release -DSQUEEZEKV_WERROR=ON)
# The sanitizer builds at -O1 with line tables only (-g1): what ASan's documentation recommends,
# and a third of the compile time of -O2 -g on the SIMD kernels, where most of CI's time went.
sanitize_opt=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")
if [ "${1:-}" = "--sanitize" ]; then
  build=build-asan
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${sanitize_opt[@]}" -DSQUEEZEKV_WERROR=ON -DSQUEEZEKV_SANITIZE=ON
         -DSQUEEZEKV_BUILD_BENCHMARKS=OFF)
fi
# -U: an older build folder's cached test list would silently leave newer test folders out.
cmake -S . -B "$build" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
if [ "${1:-}" = "--sanitize" ]; then
  tsan_tests=(ops_thread_pool_test ops_activation_q8_test core_concurrency_test engine_fragment_memo_test serve_http_test
              serve_contract_test serve_kept_test serve_saved_test)
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${sanitize_opt[@]}" -DSQUEEZEKV_WERROR=ON -DSQUEEZEKV_TSAN=ON \
    -DSQUEEZEKV_BUILD_BENCHMARKS=OFF -DSQUEEZEKV_BUILD_SHARED=OFF >/dev/null
  cmake --build build-tsan --target "${tsan_tests[@]}"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan/tests/ops/ops_thread_pool_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan/tests/ops/ops_activation_q8_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan/tests/core/core_concurrency_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan/tests/engine/engine_fragment_memo_test
  # Debian's cpp-httplib is uninstrumented: its regex internals are suppressed (tests/serve/tsan.supp).
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=tests/serve/tsan.supp" \
    build-tsan/tests/serve/serve_http_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=tests/serve/tsan.supp" \
    build-tsan/tests/serve/serve_contract_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=tests/serve/tsan.supp" \
    build-tsan/tests/serve/serve_kept_test
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=tests/serve/tsan.supp" \
    build-tsan/tests/serve/serve_saved_test
fi
