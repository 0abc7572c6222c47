#!/usr/bin/env bash
# Usage: headers_alone.sh BUILD_DIR WORK_DIR SOURCE_DIR CXX CC
# Installs BUILD_DIR into WORK_DIR/prefix and checks its headers as a user of the install meets
# them: every header it includes is installed too, and each compiles alone (C++20; the C API's
# header also as C11) with the install's include folder only.
set -euo pipefail
build=$1 work=$2 source=$3 cxx=$4 cc=$5
prefix=$work/prefix
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
cd "$prefix/include"
mapfile -t headers < <(find squeezekv -name '*.h' -o -name '*.hpp' | sort)
all=$(cd "$source/include" && find squeezekv -name '*.h' -o -name '*.hpp' | wc -l)
echo "${#headers[@]} of the $all headers of include/ installed"
if [ "${#headers[@]}" -eq 0 ] || [ "${#headers[@]}" -ge "$all" ]; then
  echo "expected the public headers only, a part of include/"; exit 1
fi

failed=0
for header in "${headers[@]}"; do
  while read -r included; do
    if [ ! -e "$included" ]; then
      echo "$header includes $included, which is not installed"; failed=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$header")
done
[ "$failed" -eq 0 ] || exit 1

for header in "${headers[@]}"; do
  printf '#include "%s"\nint main() { return 0; }\n' "$header" >"$work/alone.cc"
  "$cxx" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I "$prefix/include" "$work/alone.cc" ||
    { echo "$header does not compile alone"; failed=1; }
done
printf '#include "squeezekv/c/squeezekv.h"\nint main(void) { return 0; }\n' >"$work/alone.c"
"$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I "$prefix/include" "$work/alone.c" ||
  { echo "squeezekv/c/squeezekv.h does not compile alone as C"; failed=1; }
[ "$failed" -eq 0 ] || exit 1
echo "each installed header compiles alone"
