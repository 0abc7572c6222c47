#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks, warnings as errors) over the library, the server and the
# program, with the compile commands of a configured build folder (default build/). Not part of
# scripts/test.sh (several minutes on 2 cores); run it before a change that touches many files.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy.sh: $build/compile_commands.json is missing: configure first (scripts/test.sh, or cmake -S . -B $build -G Ninja)" >&2
  exit 2
fi
command -v clang-tidy >/dev/null || { echo "tidy.sh: clang-tidy is missing: apt-get install clang-tidy" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
find src -name '*.cc' | sort | xargs -P "$(nproc)" -n 8 clang-tidy -p "$build" --quiet >"$log" 2>&1 || status=$?
grep -v -E '^[0-9]+ warnings? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter' "$log" || true
if [ "$status" -ne 0 ]; then
  echo "tidy.sh: clang-tidy found problems (above)" >&2
  exit 1
fi
echo "tidy.sh: clang-tidy passed over $(find src -name '*.cc' | wc -l) files"
