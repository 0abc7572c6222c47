#!/usr/bin/env bash
# Reproduces docs/notes/streams.md's stream figures: the whole of tinystories_val.txt (393k tokens) as
# one stream on stories260K, warm-up 512, segments of 16,384 scored tokens; every evicting method
# at budgets 64, 128 and 256 with --positions span, cache and text, and the sliding window at 512
# as the reference. stories260K's file claims a context of 2048 but the model was trained on 512
# positions, so the span rule is given --max-distance 511 (MAX_DISTANCE=N to change it; the
# results then go to build/results/stream-dN/). Writes build/results/stream/: JSON, CSV and text
# per (budget, rule), tables.md, by_text.md (the same split by segments of plain ASCII text and
# the others) and plots of perplexity against position (PNG and SVG). Two sweeps at a time, one
# core each.
# TOKENS=N limits the stream to its first N tokens (a quick check); RULES="span" runs one rule.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target squeezekv_cli >/dev/null
max_distance=${MAX_DISTANCE:-511}
out=build/results/stream
[[ "$max_distance" == 511 ]] || out="$out-d$max_distance"  # another span: its own folder
mkdir -p "$out"
model=../shared/models/stories260K.gguf
text=../shared/data/tinystories_val.txt
tokens=${TOKENS:-0}
methods=${METHODS:-window,streaming,h2o,squeeze,pyramidkv,chunkkv,tova,snapkv}
run() {  # budget positions methods
  local name="b$1-$2"
  [[ "$3" == window ]] && name="window-b$1-$2"
  build/squeezekv sweep -m "$model" -f "$text" -t 1 -b 64 --stream --warmup 512 --segment 16384 \
    --stream-tokens "$tokens" --methods "$3" --budgets "$1" --positions "$2" --max-distance "$max_distance" \
    --json "$out/$name.json" --csv "$out/$name.csv" > "$out/$name.txt"
}
export -f run
export out model text tokens max_distance
jobs=()
for budget in 64 128 256; do
  for positions in ${RULES:-span cache text}; do jobs+=("$budget $positions $methods"); done
done
jobs+=("512 span window")
printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 bash -c 'run "$0" "$1" "$2"'
/usr/bin/python3 scripts/report.py stream-tables "$out"/*.json > "$out/tables.md"
cmake --build build --target squeezekv_python >/dev/null
/usr/bin/python3 scripts/report.py stream-by-text "$out"/*.json > "$out/by_text.md"
/usr/bin/python3 scripts/report.py stream-plots "$out" "$out/plots"
echo "results: $out/tables.md, $out/by_text.md, $out/plots/"
