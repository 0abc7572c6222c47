#!/usr/bin/env bash
# Reproduces docs/notes/stories260k.md's "Eviction, quantization, both, at equal memory": squeeze and window
# at five budgets and the full cache, each with keys in f16, q8_0, kivi2 or kivi4 and values as the
# keys, in q4_0 or in kivi2 (KIVI without an fp16 residual: --kivi-residual 0, groups of 32), on
# stories260K and TinyStories validation text (n_ctx 512, 100 chunks, the default positions: span,
# which equals text positions within 512). Writes build/kvq/: the sweep's JSON and CSV, pareto.md
# and the Pareto plot (PNG and SVG).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target squeezekv_cli >/dev/null
out=build/kvq
mkdir -p "$out"
build/squeezekv sweep -m ../shared/models/stories260K.gguf -f ../shared/data/tinystories_val.txt -c 512 -b 64 \
  -t "${THREADS:-2}" --chunks "${CHUNKS:-100}" --methods full,squeeze,window --budgets 32,64,96,128,192 \
  --kv-types f16,q8_0,kivi2,kivi4 --v-types auto,q4_0,kivi2 --kivi-residual 0 \
  --json "$out/sweep.json" --csv "$out/sweep.csv" > "$out/sweep.txt"
/usr/bin/python3 scripts/report.py pareto "$out/plots" "$out/sweep.json" > "$out/pareto.md"
echo "results: $out/pareto.md, $out/plots/"
