#!/usr/bin/env python3
"""The document workflow of a saved cache (docs/cache_file.md): read a long document once,
compress its cache (squeeze at --share of the document's tokens), save it, then answer questions
from the loaded file instead of prefilling the document again. Per model it measures, with
`squeezekv generate --json` (greedy, one answer token: the time to the first answer token):

  fresh   the document and a question prefilled together (what a run without the file does)
  saved   the document prefilled alone and saved (--save-cache, --save-after prompt)
  loaded  per question: the file loaded (load_cache_seconds) and the question prefilled after it

and the file's size against the cache's resident K/V bytes. Resumable: one JSON line per finished
step in --out, skipped when the script runs again.

  python3 scripts/cache_file_bench.py --cli build/squeezekv \
      --model ~/.cache/squeezekv/models/SmolLM2-135M-Instruct.Q4_1.gguf --tokens 8192 --questions 4 \
      --out build/cache_file_bench.jsonl
"""
import argparse
import json
import os
import subprocess
import sys

QUESTIONS = ["Who is the story about?", "Where does it happen?", "How does it end?", "What did they find?",
             "Who helped them?", "What was the problem?", "Why were they happy?", "What happened first?"]


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return json.loads(out.stdout[out.stdout.index("{"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/squeezekv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", default="../shared/data/tinystories_val.txt")
    ap.add_argument("--tokens", type=int, default=8192, help="document tokens (about)")
    ap.add_argument("--share", type=float, default=0.1, help="budget as a share of the document's tokens")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--work", default="build/cache_file_bench")
    ap.add_argument("--out", default="build/cache_file_bench.jsonl")
    a = ap.parse_args()
    if a.tokens < 64 or not 0 < a.share <= 1 or not 1 <= a.questions <= len(QUESTIONS):
        ap.error("--tokens >= 64, --share in (0, 1], --questions in [1, 8]")
    os.makedirs(a.work, exist_ok=True)
    name = os.path.basename(a.model)
    done = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            for line in f:
                r = json.loads(line)
                if r["model"] == name and r["tokens"] == a.tokens:
                    done[r["step"]] = r

    def record(step, r):
        r.update(model=name, tokens=a.tokens, step=step)
        with open(a.out, "a") as f:
            f.write(json.dumps(r) + "\n")
        done[step] = r
        print(json.dumps(r), file=sys.stderr)

    # The document: the text's first --tokens tokens' worth of characters (about 4 a token).
    with open(a.text, encoding="utf-8", errors="replace") as f:
        document = f.read(a.tokens * 4)
    doc_path = os.path.join(a.work, "document.txt")
    with open(doc_path, "w") as f:
        f.write(document)
    budget = max(16, int(a.tokens * a.share))
    common = ["-m", a.model, "--temp", "0", "-t", str(a.threads), "--json", "-b", "512"]
    cache = ["--method", "squeeze", "--budget", str(budget)]
    skv = os.path.join(a.work, name + ".skv")

    def question_file(i):
        path = os.path.join(a.work, f"question{i}.txt")
        with open(path, "w") as f:
            f.write(document + "\n\nQuestion: " + QUESTIONS[i] + "\nAnswer:")
        return path

    if "saved" not in done or not os.path.exists(skv):
        r = run([a.cli, "generate", *common, *cache, "-f", doc_path, "-n", "0", "--save-after", "prompt",
                 "--save-cache", skv])
        info = run([a.cli, "cache", "info", skv, "--json"])
        record("saved", {"prompt_tokens": r["prompt_tokens"], "prompt_seconds": r["prompt_tokens"] /
                         r["prompt_tokens_per_second"], "file_bytes": info["file_bytes"],
                         "kv_kept_bytes": info["kv_kept_bytes"], "kv_full_bytes": info["kv_full_bytes"],
                         "slot_bytes": info["slot_bytes"]})
    for i in range(a.questions):
        q = question_file(i)
        if f"fresh{i}" not in done:
            r = run([a.cli, "generate", *common, *cache, "-f", q, "-n", "1"])
            record(f"fresh{i}", {"first_token_seconds": r["prompt_tokens"] / r["prompt_tokens_per_second"],
                                 "prompt_tokens": r["prompt_tokens"]})
        if f"loaded{i}" not in done:
            r = run([a.cli, "generate", *common, "--load-cache", skv, "-f", q, "-n", "1"])
            prompt = r["prompt_tokens"] / r["prompt_tokens_per_second"]
            record(f"loaded{i}", {"first_token_seconds": r["load_cache_seconds"] + prompt,
                                  "load_cache_seconds": r["load_cache_seconds"], "prompt_tokens": r["prompt_tokens"],
                                  "cached_tokens": r["cached_tokens"]})
    fresh = [done[f"fresh{i}"]["first_token_seconds"] for i in range(a.questions)]
    loaded = [done[f"loaded{i}"]["first_token_seconds"] for i in range(a.questions)]
    s = done["saved"]
    print(json.dumps({"model": name, "document_tokens": s["prompt_tokens"], "budget": budget,
                      "fresh_first_token_s": sum(fresh) / len(fresh), "loaded_first_token_s": sum(loaded) / len(loaded),
                      "speedup": sum(fresh) / sum(loaded), "file_bytes": s["file_bytes"],
                      "kv_kept_bytes": s["kv_kept_bytes"], "slot_bytes": s["slot_bytes"],
                      "file_over_kv": s["file_bytes"] / s["kv_kept_bytes"] - 1,
                      "file_over_resident": s["file_bytes"] / (s["kv_kept_bytes"] + s["slot_bytes"]) - 1}))


if __name__ == "__main__":
    main()
