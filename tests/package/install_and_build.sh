#!/usr/bin/env bash
# Usage: install_and_build.sh BUILD_DIR WORK_DIR EXAMPLES_DIR "EXTRA_FLAGS" PYTHON CC MAKE_PROGRAM
# Installs BUILD_DIR into WORK_DIR/prefix and builds and runs the examples against that install.
set -euo pipefail
build=$1 work=$2 examples=$3 flags=$4 python=$5 cc=$6 make_program=$7
prefix=$work/prefix
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

# What an install holds: public headers only, both libraries, the program, the package files.
for f in include/squeezekv/c/squeezekv.h include/squeezekv/cache/model_cache.h \
         include/squeezekv/engine/engine.h include/squeezekv/eval/perplexity.h \
         include/squeezekv/methods/registry.h lib/libsqueezekv.a lib/libsqueezekv.so bin/squeezekv \
         lib/cmake/squeezekv/squeezekvConfig.cmake lib/pkgconfig/squeezekv.pc; do
  [ -e "$prefix/$f" ] || { echo "missing from the install: $f"; exit 1; }
done
if find "$prefix/include" -name '*internal*' -o -path '*/cli/*' | grep -q .; then
  echo "internal headers were installed"; exit 1
fi
"$prefix/bin/squeezekv" budgets --concentrations 0.1,0.5,0.9 --avg 100 --sinks 4 --strength 1 | grep -q '180 100 20'

# An outside CMake project: find_package(squeezekv CONFIG), shared and static targets, C and C++.
cmake -S "$examples" -B "$work/examples" -G Ninja -DCMAKE_MAKE_PROGRAM="$make_program" \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
      -DCMAKE_C_FLAGS="-Wall -Wextra -Werror $flags" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror $flags" \
      -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$work/configure.log"
cmake --build "$work/examples"
for program in attention_loop attention_loop_static attention_loop_c attention_loop_c_static; do
  echo "== $program"
  "$work/examples/$program"
done
if ldd "$work/examples/attention_loop_static" | grep -q libsqueezekv; then
  echo "attention_loop_static links libsqueezekv.so"; exit 1
fi

# pkg-config: the C example against the shared library, then statically with Libs.private.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2086,SC2046
"$cc" -std=c11 $flags "$examples/attention_loop.c" -o "$work/pc_shared" $(pkg-config --cflags --libs squeezekv) -lm
LD_LIBRARY_PATH=$prefix/lib "$work/pc_shared" >/dev/null
# shellcheck disable=SC2086,SC2046
"$cc" -std=c11 $flags "$examples/attention_loop.c" -o "$work/pc_static" \
  $(pkg-config --cflags --static --libs squeezekv | sed 's/-lsqueezekv\b/-l:libsqueezekv.a/') -lm
"$work/pc_static" >/dev/null
echo "pkg-config builds ran"

# The installed Python package imports from the install, not from the build tree.
if [ -n "$python" ]; then
  site=$(find "$prefix/lib" -maxdepth 2 -type d -name dist-packages | head -n1)
  PYTHONPATH=$site "$python" -c "
import squeezekv, sys
assert squeezekv.__file__.startswith('$prefix'), squeezekv.__file__
assert squeezekv.squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 1.0) == [180, 100, 20]
print('python package from', squeezekv.__file__)"
fi
