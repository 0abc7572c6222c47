#!/usr/bin/env bash
# Reproduces docs/results.md's "Eviction, quantization, both, at equal memory": h2o, squeeze and
# window at six budgets and the full cache, each with f16, q8_0, f16 keys + q4_0 values and
# q8_0 keys + q4_0 values, on stories260K and TinyStories validation text (n_ctx 512, 100 chunks,
# --positions cache, the rule these figures were measured with: POSITIONS=span for the current
# default, which equals text positions within 512). Writes build/kvq/: the sweep's JSON and CSV, pareto.md and the
# Pareto plot (PNG and SVG).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target squeezekv_cli >/dev/null
out=build/kvq
mkdir -p "$out"
build/squeezekv sweep -m ../shared/models/stories260K.gguf -f ../shared/data/tinystories_val.txt -c 512 -b 64 -t 1 \
  --chunks "${CHUNKS:-100}" --positions "${POSITIONS:-cache}" --methods full,h2o,squeeze,window --budgets 16,32,64,96,128,192 \
  --kv-types f16,q8_0 --v-types auto,q4_0 --json "$out/sweep.json" --csv "$out/sweep.csv" > "$out/sweep.txt"
/usr/bin/python3 scripts/plot_pareto.py "$out/plots" "$out/sweep.json" > "$out/pareto.md"
echo "results: $out/pareto.md, $out/plots/"
