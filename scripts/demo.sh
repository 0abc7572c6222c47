#!/usr/bin/env bash
# The main job: installs the dependencies, builds the `squeezekv` program and runs the synthetic
# SqueezeAttention sweep (the reference library's benchmark) with a short readable report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target squeezekv_cli >/dev/null
build/squeezekv synth "$@"
