#!/usr/bin/env python3
"""The main job, on a real model: a fact hidden early in a long document, asked for at its end.

Builds a document of about --tokens tokens (4,000 by default) as llama.cpp's passkey example does
(Mohtashami and Jaggi's test: a pass key inside repeated filler sentences; --text FILE takes real
text as the haystack instead), puts the key at --depth of it and asks for it after it. The
document is read once and compressed before the question arrives (query-agnostic: `generate
--question`), then the question is answered greedily: with the full cache, with SqueezeAttention
and with KVzip (rows scored by how much the model needs them to repeat the document; its scoring
pass counts in the prompt's speed) at budgets down to about 10 % of the full cache's rows, and a
sliding window; for contrast, SnapKV at the smallest budget with the question inside the one
prompt (query-aware: its window sees the question). Each line shows the answer, whether it is
right, the share of K/V rows kept, the resident K/V bytes and the speed: the demo shows where the
trade-off lies, whatever it shows. Then one short chat reply through the model's chat template.
Run by scripts/demo.sh.
"""
import argparse
import json
import subprocess
import sys


FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.\n\n")


def document(tokens: int, depth: float, key: str, text_path: str) -> str:
    """About `tokens` tokens of haystack (SmolLM2 spells a filler sentence in 24 tokens, English
    text in about one token per 4 characters) with the pass key at `depth`."""
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    if text_path:
        with open(text_path, encoding="utf-8", errors="replace") as f:
            haystack = f.read(tokens * 4)
        cut = haystack.rfind(". ", 0, int(len(haystack) * depth)) + 2
        body = haystack[:cut] + needle + haystack[cut:]
    else:
        n = tokens // 24
        parts = [FILLER] * n
        parts.insert(int(n * depth), needle)
        body = "".join(parts)
    return INTRO + body


QUESTION = "\nWhat is the pass key? The pass key is"


def run(squeezekv: str, model: str, prompt_file: str, extra: list) -> dict:
    cmd = [squeezekv, "generate", "-m", model, "-f", prompt_file, "-n", "8", "--temp", "0", "--json"] + extra
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"demo: {' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squeezekv", default="build/squeezekv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", default="", help="real text as the haystack (default: the passkey filler)")
    ap.add_argument("--tokens", type=int, default=4000, help="about how long the document is")
    ap.add_argument("--depth", type=float, default=0.1, help="where the pass key sits, 0 to 1")
    ap.add_argument("--key", default="68315")
    ap.add_argument("--budgets", default="1024,400", help="squeeze budgets (rows per layer and KV head)")
    ap.add_argument("--threads", default="2")
    args = ap.parse_args()

    prompt_file = "build/demo_needle_prompt.txt"
    aware_file = "build/demo_needle_prompt_with_question.txt"
    doc = document(args.tokens, args.depth, args.key, args.text)
    with open(prompt_file, "w", encoding="utf-8") as f:
        f.write(doc)
    with open(aware_file, "w", encoding="utf-8") as f:
        f.write(doc + QUESTION)

    # (label, options, query-aware): the query-agnostic rows get the question after the document.
    configs = [("full cache", ["--method", "full"], False)]
    budgets = [int(b) for b in args.budgets.split(",")]
    for b in budgets:
        configs.append((f"squeeze, budget {b}", ["--method", "squeeze", "--budget", str(b)], False))
        configs.append((f"kvzip, budget {b}", ["--method", "kvzip", "--budget", str(b)], False))
    small = str(budgets[-1])
    configs.append((f"window, budget {small}", ["--method", "window", "--budget", small], False))
    # Query-aware for contrast: the question in the one prompt, so SnapKV's window sees it.
    configs.append((f"snapkv {small}, q-aware", ["--method", "snapkv", "--budget", small, "-b", "16384"], True))
    print(f"A pass key ({args.key}) hidden {int(args.depth * 100)} % into a document, asked for after it "
          f"({args.model.rsplit('/', 1)[-1]}, {args.threads} threads):\n")
    print(f"{'cache':<22} {'answer':<18} {'right':<6} {'rows kept':>10} {'KV resident':>12} {'prompt tok/s':>13} "
          f"{'decode tok/s':>13}")
    full_rows = doc_tokens = None
    for label, extra, aware in configs:
        question = [] if aware else ["--question", QUESTION]
        r = run(args.squeezekv, args.model, aware_file if aware else prompt_file,
                extra + question + ["-t", args.threads])
        answer = r["text"].strip().replace("\n", " ") or "(nothing)"
        rows = sum(r["layer_kept"])
        full_rows = full_rows or rows
        doc_tokens = doc_tokens or r["prompt_tokens"]
        print(f"{label:<22} {answer[:18]:<18} {'yes' if args.key in answer else 'no':<6} "
              f"{100.0 * rows / full_rows:>9.1f}% {r['kv_kept_bytes'] / 2**20:>8.2f} MiB "
              f"{r['prompt_tokens_per_second']:>13.1f} {r['decode_tokens_per_second']:>13.1f}")
    print(f"\n(the document: {doc_tokens} tokens, prefilled 512 at a time and compressed before the "
          "question, except the query-aware row; 'rows kept' counts K/V rows against the full cache's; kvzip's "
          "prompt speed includes its scoring pass)")

    print("\nA short chat reply through the model's chat template:\n")
    chat = [args.squeezekv, "generate", "-m", args.model, "--chat", "-n", "48", "-t", args.threads,
            "--method", "squeeze", "--budget", "256", "-p", "Write one sentence about the sea."]
    print("> Write one sentence about the sea.")
    subprocess.run(chat, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
