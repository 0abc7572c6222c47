#!/usr/bin/env bash
# Checks the C and C++ files against .clang-format (Google style, 120 columns): every tracked file,
# or with a git revision the files changed since it (`scripts/check_format.sh origin/main`).
# scripts/test.sh runs it; `clang-format -i FILE` mends a file it names.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format.sh: clang-format is missing: scripts/setup.sh installs it" >&2; exit 2; }
if [ $# -gt 0 ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$1" -- '*.cc' '*.h' '*.hpp' '*.c')
else
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.hpp' '*.c')
fi
[ ${#files[@]} -eq 0 ] && { echo "check_format.sh: no C or C++ file to check"; exit 0; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format.sh: not in .clang-format's style (clang-format -i FILE mends it):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files in .clang-format's style"
