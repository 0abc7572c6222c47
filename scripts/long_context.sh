#!/usr/bin/env bash
# Reproduces docs/results.md's long-context section on SmolLM2-135M-Instruct: needle retrieval
# (RULER's single needle in real text) over lengths 1k-8k, 5 depths, every method at 5 shares of
# the prompt's rows, query-agnostic and query-aware; K/V storage alone and with eviction; the
# books' perplexity and KL at n_ctx 4096 and 8192; a whole book streamed through an evicting cache;
# and the layer x head x scorer combinations at 4096 tokens (pieces combos-*). The grid is hours
# long on 2 cores, so it runs in resumable pieces of under 2 hours each:
#
#   scripts/long_context.sh                 # every piece not yet done, then the tables and plots
#   scripts/long_context.sh PIECE ...       # those pieces only (names below), then the report
#   scripts/long_context.sh --list          # the pieces, their state and measured wall time
#
# A piece interrupted part-way resumes where it stopped (the needle grids append to their JSON
# lines and skip the cells already there); a piece done is not run again. Output: build/long/
# (JSON, CSV, tables.md, plots). Set MODEL to another GGUF file to measure another model, GEMMA
# the Gemma 3 file of combos-gemma3, SAMPLES to change the samples per needle cell (2 by default),
# DEPTHS the needle depths (0,0.25,0.5,0.75,1 by default; the 8k pieces keep their halves),
# THREADS (every core by default), SQUEEZEKV the binary (build/squeezekv by default).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/long}
# The binary (SQUEEZEKV): a copy set aside keeps a long run on one build while the tree is rebuilt.
squeezekv=${SQUEEZEKV:-build/squeezekv}
model=${MODEL:-$HOME/.cache/squeezekv/models/SmolLM2-135M-Instruct.Q4_1.gguf}
samples=${SAMPLES:-2}
threads=${THREADS:-0}
books=${SQUEEZEKV_BOOKS:-$HOME/.cache/squeezekv/books}
mkdir -p "$out"

methods_all=full,window,streaming,h2o,tova,snapkv,pyramidkv,squeeze,chunkkv,knorm
# Query-aware differs from query-agnostic only for policies that score rows: the window,
# StreamingLLM and key norm choose the same rows wherever the question is.
methods_scoring=full,h2o,tova,snapkv,pyramidkv,squeeze,chunkkv
shares=0.02,0.05,0.1,0.2,0.4
depths=${DEPTHS:-0,0.25,0.5,0.75,1}
# The needle command every SmolLM2 grid piece runs, before its depths, lengths, shares and methods;
# needle_at with the grid's depths, needle with its shares too. (The CLI refuses an option given
# twice, so the 8k halves, with depths of their own, start from needle_cmd.)
# "8k" needles: the longest prompt whose full cache (the prompt and the task's 16 answer tokens)
# fits SmolLM2's context of 8,192 tokens, which needle checks before it runs.
len_8k=8176
needle_cmd=("$squeezekv" needle -m "$model" --task single -t "$threads" --samples "$samples" --seed 0 --resume)
needle_at=("${needle_cmd[@]}" --depths "$depths")
grid=(--budget-shares "$shares" --importances key-dispersion,hidden-cosine)
needle=("${needle_at[@]}" "${grid[@]}")
# The layer x head x scorer combinations (squeeze_snapkv, squeeze_adakv, h2o_adakv) against their
# parts and the single-axis anchors, at 4096 tokens and the shares where retrieval is in play.
methods_combos=full,h2o,snapkv,adakv,pyramidkv,squeeze,squeeze_snapkv,squeeze_adakv,h2o_adakv
combos=("${needle_at[@]}" --lengths 4096 --budget-shares "$shares" --methods "$methods_combos")

# Query-agnostic compression (read once, ask later): kvzip read once and streaming, under the
# global ranking and under squeeze, beside the cheap query-agnostic baselines and the cumulative
# scorers, at 10 and 25 % of the rows, and kvzip alone at 5 % (pieces kvzip-*); kvzip_plus beside it.
methods_kvzip=full,kvzip,kvzip_plus,kvzip_stream,kvzip_uniform,squeeze_kvzip,expected_attention,keydiff,h2o,squeeze,snapkv
kvzip_shares=0.1,0.25
kvzip=("${needle_at[@]}" --budget-shares "$kvzip_shares" --methods "$methods_kvzip")
qwen=${QWEN:-$HOME/.cache/squeezekv/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
on_qwen=("$squeezekv" needle -m "$qwen" --task single -t "$threads" --samples "$samples" --seed 0 --resume
  --depths "$depths" --budget-shares 0.1,0.25 --methods full,kvzip,kvzip_plus,kvzip_uniform,kvzip_stream,squeeze)

pieces=(kvzip-2k kvzip-4k kvzip-5pct kvzip-8k-a kvzip-8k-b kvzip-tasks kvzip-questions kvzip-qwen-4k kvzip-qwen-8k kvzip-books
  kvzip-cost combos-qaw combos-qag combos-kernel combos-kernel-grid combos-books-emma combos-books-kjv combos-kernel-books combos-books-2pct combos-gemma3 combos-gemma3-qag combos-gemma3-books
  combos-gemma3-shares combos-gemma3-qag-shares combos-gemma3-books-shares qag-1k2k qag-4k qag-8k-a qag-8k-b qaw-1k2k qaw-4k qaw-8k-a qaw-8k-b storage storage-shares books-4096 books-8192 books-storage
  stream)

# Gemma 3 270M (GEMMA), for the combinations checked on a second model: its needle command, and
# the shares of a piece (the first pieces at 10 and 40 %, the -shares pieces at the other three).
gemma=${GEMMA:-$HOME/.cache/squeezekv/models/gemma-3-270m-q4_k_m.gguf}
on_gemma=("$squeezekv" needle -m "$gemma" --task single -t "$threads" --samples "$samples" --seed 0
  --depths "$depths" --lengths 4096 --resume)
methods_gemma=full,h2o,snapkv,adakv,squeeze_snapkv,squeeze_adakv
gemma_shares() { [[ $1 == *-shares ]] && echo 0.02,0.05,0.2 || echo 0.1,0.4; }

# KL from the full cache on a book (first half of one n_ctx chunk the prompt, the second half
# decoded against the evicting cache): sweep_book CTX BOOK STEM SWEEP_OPTION... writes STEM.json
# and STEM.txt. A book already written (by an interrupted run of its piece) is not measured again.
sweep_book() {
  local ctx=$1 book=$2 stem=$3
  shift 3
  [[ -s $out/$stem.json ]] && return 0
  scripts/fetch_books.py "$book" > /dev/null
  "$squeezekv" sweep -f "$books/$book.txt" -c "$ctx" --chunks 1 -t "$threads" "$@" \
    --json "$out/$stem.json" > "$out/$stem.txt"
}

# The combinations at n_ctx 4096: combos_sweep MODEL BOOK BUDGETS NAME writes books_4096_NAME_BOOK.
combos_sweep() {
  sweep_book 4096 "$2" "books_4096_$4_$2" -m "$1" --methods "$methods_combos" --budgets "$3"
}

run_piece() {
  case "$1" in
    combos-qaw) "${combos[@]}" --question-in-prompt --json "$out/combos_qaw.jsonl" ;;
    combos-qag) "${combos[@]}" --json "$out/combos_qag.jsonl" ;;
    combos-kernel)
      # snapkv's pooling width: 31 positions instead of 5 keeps whole 7-digit values (query-aware).
      "${needle_at[@]}" --lengths 4096 --budget-shares 0.1,0.4 --methods snapkv,squeeze_snapkv --kernels 31 \
        --question-in-prompt --json "$out/combos_qaw.jsonl"
      ;;
    combos-kernel-grid)
      # The best query-aware configuration of combos-kernel (snapkv's 31-position pooling) at 10 %
      # of the rows on the grid's five depths, at 4096 and 8176 tokens.
      "${needle_at[@]}" --lengths 4096,"$len_8k" --budget-shares 0.1 --methods full,snapkv,squeeze_snapkv --kernels 31 \
        --question-in-prompt --json "$out/combos_qaw_kernel.jsonl"
      ;;
    combos-kernel-books)
      # snapkv's wider kernel on the book: does what keeps whole needles cost KL?
      sweep_book 4096 austen-emma books_4096_kernel31_austen-emma -m "$model" --methods snapkv,squeeze_snapkv \
        --kernels 31 --budgets 205,410,819,1638
      ;;
    combos-gemma3 | combos-gemma3-shares)
      # The defaults chosen on SmolLM2, checked unchanged on Gemma 3 270M (its global layers evict;
      # its sliding layers hold their window), query-aware at 4096 tokens; and snapkv's wider kernel.
      # combos-gemma3 at 10 and 40 % of the rows, combos-gemma3-shares at the issue's other shares.
      local gemma_qaw=("${on_gemma[@]}" --budget-shares "$(gemma_shares "$1")" --question-in-prompt
        --json "$out/combos_gemma3_qaw.jsonl")
      "${gemma_qaw[@]}" --methods "$methods_gemma"
      "${gemma_qaw[@]}" --methods snapkv,squeeze_snapkv --kernels 31
      ;;
    combos-gemma3-qag | combos-gemma3-qag-shares)
      # The same cells query-agnostic: the cache chooses before the question comes.
      "${on_gemma[@]}" --budget-shares "$(gemma_shares "$1")" --json "$out/combos_gemma3_qag.jsonl" \
        --methods "$methods_gemma"
      ;;
    combos-gemma3-books) combos_sweep "$gemma" austen-emma 410,1638 combos_gemma3 ;;
    combos-gemma3-books-shares) combos_sweep "$gemma" austen-emma 82,205,819 combos_gemma3_shares ;;
    combos-books-emma) combos_sweep "$model" austen-emma 205,410,819,1638 combos ;;
    combos-books-kjv) combos_sweep "$model" kjv 205,410,819,1638 combos ;;
    combos-books-2pct)
      for book in austen-emma kjv; do combos_sweep "$model" "$book" 82 combos_2pct; done
      ;;
    kvzip-2k | kvzip-4k)
      local n=2048
      [[ $1 == kvzip-4k ]] && n=4096
      "${kvzip[@]}" --lengths "$n" --json "$out/kvzip_qag.jsonl"
      ;;
    kvzip-5pct)
      "${needle_at[@]}" --lengths 2048,4096 --budget-shares 0.05 --methods full,kvzip,kvzip_stream,kvzip_uniform \
        --json "$out/kvzip_qag.jsonl"
      ;;
    kvzip-8k-a | kvzip-8k-b)
      local half=0,0.25,0.5
      [[ $1 == kvzip-8k-b ]] && half=0.75,1
      "${needle_cmd[@]}" --depths "$half" --lengths "$len_8k" --budget-shares "$kvzip_shares" --methods "$methods_kvzip" \
        --json "$out/kvzip_qag.jsonl"
      ;;
    kvzip-tasks)
      # multikey and multivalue at 4096, query-agnostic: the same methods at 10 and 25 %.
      for task in multikey multivalue; do
        "$squeezekv" needle -m "$model" --task "$task" -t "$threads" --samples "$samples" --seed 0 --resume \
          --depths "$depths" --lengths 4096 --budget-shares 0.1,0.25 --methods full,kvzip,kvzip_uniform,squeeze,h2o \
          --json "$out/kvzip_$task.jsonl"
      done
      ;;
    kvzip-questions)
      # Four needles with different keys, asked in turn against one compressed cache (a chat over
      # a document), at 4096 tokens.
      "${needle_at[@]}" --lengths 4096 --questions 4 --budget-shares 0.1,0.25 \
        --methods full,kvzip,kvzip_uniform,kvzip_stream,squeeze,h2o --json "$out/kvzip_questions.jsonl"
      ;;
    kvzip-qwen-4k | kvzip-qwen-8k)
      local n=4096
      [[ $1 == kvzip-qwen-8k ]] && n=8192
      "${on_qwen[@]}" --lengths "$n" --json "$out/kvzip_qwen.jsonl"
      ;;
    kvzip-books)
      # The books' KL at n_ctx 4096, 20 % of the rows: does retrieval cost kvzip the books?
      for book in austen-emma kjv; do
        sweep_book 4096 "$book" "books_4096_kvzip_$book" -m "$model" \
          --methods full,kvzip,kvzip_uniform,kvzip_stream,squeeze,expected_attention,keydiff --budgets 819
      done
      ;;
    kvzip-cost)
      # The scoring pass against a plain prefill of the same context: `bench`'s prompt speed with
      # the full cache and with kvzip at a budget above the prompt (nothing evicted: the pass alone
      # added), 3 repetitions, on SmolLM2 and Qwen2.5-1.5B.
      for m in "$model" "$qwen"; do
        local stem
        stem=kvzip_cost_$(basename "$m" .gguf)
        [[ -s $out/$stem.json ]] && continue
        "$squeezekv" bench -m "$m" -p 2048,4096 -n 0 -r 3 -t "$threads" --method full,kvzip,kvzip_plus --budget 8192 \
          --bandwidth-mib 0 -o json > "$out/$stem.json"
      done
      ;;
    qag-1k2k) "${needle[@]}" --lengths 1024,2048 --methods "$methods_all" --json "$out/needle_qag.jsonl" ;;
    qag-4k) "${needle[@]}" --lengths 4096 --methods "$methods_all" --json "$out/needle_qag.jsonl" ;;
    qag-8k-a) "${needle_cmd[@]}" "${grid[@]}" --lengths "$len_8k" --depths 0,0.25,0.5 --methods "$methods_all" --json "$out/needle_qag.jsonl" ;;
    qag-8k-b) "${needle_cmd[@]}" "${grid[@]}" --lengths "$len_8k" --depths 0.75,1 --methods "$methods_all" --json "$out/needle_qag.jsonl" ;;
    qaw-1k2k | qaw-4k)
      local lengths=1024,2048
      [[ $1 == qaw-4k ]] && lengths=4096
      "${needle[@]}" --question-in-prompt --lengths "$lengths" --methods "$methods_scoring" \
        --json "$out/needle_qaw.jsonl"
      ;;
    qaw-8k-a)
      "${needle_cmd[@]}" "${grid[@]}" --question-in-prompt --lengths "$len_8k" --depths 0,0.25,0.5 --methods "$methods_scoring" \
        --json "$out/needle_qaw.jsonl"
      ;;
    qaw-8k-b)
      "${needle_cmd[@]}" "${grid[@]}" --question-in-prompt --lengths "$len_8k" --depths 0.75,1 --methods "$methods_scoring" \
        --json "$out/needle_qaw.jsonl"
      ;;
    storage | storage-shares)
      # K/V storage alone (the full cache's rows in fewer bits) and with eviction, at 4096 tokens;
      # the -shares piece adds the two smallest shares to the same file.
      local storage_shares=0.1,0.2,0.4
      [[ $1 == *-shares ]] && storage_shares=0.02,0.05
      "${needle_at[@]}" --lengths 4096 --methods full,h2o,squeeze,snapkv --budget-shares "$storage_shares" \
        --importances key-dispersion --kv-types q8_0,q4_0,kivi2,kivi4 --json "$out/needle_storage.jsonl"
      ;;
    books-storage)
      # Storage x eviction on the books at n_ctx 4096: KL from the f16 full cache (f16 first, so
      # that it is the reference and its eviction rows sit beside the quantized ones).
      for book in austen-emma kjv; do
        sweep_book 4096 "$book" "books_storage_4096_$book" -m "$model" --methods full,h2o,squeeze,snapkv \
          --budgets 82,205,410,819,1638 --importances key-dispersion --kv-types f16,q8_0,q4_0,kivi2,kivi4
      done
      ;;
    books-4096 | books-8192)
      local ctx=${1#books-} budgets
      budgets=$(python3 -c "import sys; c=int(sys.argv[1]); print(','.join(str(round(s*c)) for s in (0.02,0.05,0.1,0.2,0.4)))" "$ctx")
      for book in austen-emma kjv; do
        sweep_book "$ctx" "$book" "books_${ctx}_$book" -m "$model" --methods "$methods_all" --budgets "$budgets" \
          --importances key-dispersion,hidden-cosine
      done
      ;;
    stream)
      scripts/fetch_books.py austen-emma > /dev/null
      for method in squeeze h2o; do
        [[ -s $out/stream_emma_$method.json ]] && continue
        "$squeezekv" perplexity -m "$model" -f "$books/austen-emma.txt" -t "$threads" --stream \
          --method "$method" --budget 819 --json --csv "$out/stream_emma_$method.csv" > "$out/stream_emma_$method.json"
      done
      ;;
    *)
      echo "long_context.sh: unknown piece '$1' (pieces: ${pieces[*]})" >&2
      exit 2
      ;;
  esac
}

if [[ ${1:-} == --list ]]; then
  for p in "${pieces[@]}"; do
    if [[ -f $out/done.$p ]]; then
      echo "$p: done in $(cat "$out/done.$p") s"
    elif [[ -f $out/time.$p ]]; then
      echo "$p: to run ($(cat "$out/time.$p") s so far)"
    else
      echo "$p: to run"
    fi
  done
  exit 0
fi
[[ -f $model ]] || {
  echo "long_context.sh: model file '$model' not found: run scripts/fetch_models.sh (or set MODEL)" >&2
  exit 2
}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --target squeezekv > /dev/null
todo=("$@")
[[ ${#todo[@]} -gt 0 ]] || todo=("${pieces[@]}")
# A piece's wall time adds up over its runs, an interrupted one included (time.PIECE), so that a
# piece run in parts reports all it took.
current="" start=0
record_time() {
  [[ -n $current ]] || return 0
  local spent=0
  [[ -f $out/time.$current ]] && spent=$(cat "$out/time.$current")
  echo $((spent + $(date +%s) - start)) > "$out/time.$current"
  current=""
}
trap 'record_time; exit 130' INT TERM
for p in "${todo[@]}"; do
  [[ -f $out/done.$p ]] && continue
  echo "long_context.sh: piece $p" >&2
  current=$p start=$(date +%s)
  run_piece "$p"
  record_time
  mv "$out/time.$p" "$out/done.$p"
done
/usr/bin/python3 scripts/report.py long-context "$out" > "$out/tables.md"
echo "long_context.sh: tables in $out/tables.md, plots in $out/plots" >&2
