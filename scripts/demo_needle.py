#!/usr/bin/env python3
"""The main job, on a real model: a fact hidden early in a long document, asked for at its end.

Builds a document of about --chars characters of real text (about 4,000 SmolLM2 tokens by default)
with one pass key placed at --depth of it, asks for the key through the model's chat template, and
answers it with the full cache and with SqueezeAttention at budgets down to about 10 % of the full
cache's rows (and a sliding window at the smallest budget, for contrast). Each line shows the
answer, whether it is right, the resident K/V bytes and the speed: the demo shows where the
trade-off lies, whatever it shows. Then one short chat reply. Run by scripts/demo.sh.
"""
import argparse
import json
import subprocess
import sys


def document(text_path: str, chars: int, depth: float, key: str) -> str:
    with open(text_path, encoding="utf-8", errors="replace") as f:
        haystack = f.read(chars)
    # Cut at sentence ends so that the needle stands as a sentence of its own.
    cut = haystack.rfind(". ", 0, int(len(haystack) * depth)) + 2
    needle = f" Remember this: the pass key is {key}. The pass key is {key}. "
    return haystack[:cut] + needle + haystack[cut:].rsplit(". ", 1)[0] + "."


def run(squeezekv: str, model: str, prompt_file: str, extra: list) -> dict:
    cmd = [squeezekv, "generate", "-m", model, "-f", prompt_file, "--chat", "-n", "16", "--json"] + extra
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"demo: {' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--squeezekv", default="build/squeezekv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True, help="the haystack: any long English text")
    ap.add_argument("--chars", type=int, default=15500, help="characters of text (about 4,000 tokens)")
    ap.add_argument("--depth", type=float, default=0.1, help="where the pass key sits, 0 to 1")
    ap.add_argument("--key", default="68315")
    ap.add_argument("--budgets", default="1024,512,400", help="squeeze budgets (rows per layer and KV head)")
    ap.add_argument("--threads", default="2")
    args = ap.parse_args()

    question = "\n\nWhat is the pass key? Answer with the number only."
    prompt_file = "build/demo_needle_prompt.txt"
    with open(prompt_file, "w", encoding="utf-8") as f:
        f.write(document(args.text, args.chars, args.depth, args.key) + question)

    configs = [("full cache", ["--method", "full"])]
    budgets = [int(b) for b in args.budgets.split(",")]
    configs += [(f"squeeze, budget {b}", ["--method", "squeeze", "--budget", str(b)]) for b in budgets]
    configs.append((f"window, budget {budgets[-1]}", ["--method", "window", "--budget", str(budgets[-1])]))
    print(f"A pass key ({args.key}) hidden {int(args.depth * 100)} % into a document, asked for at its end "
          f"({args.model.rsplit('/', 1)[-1]}, {args.threads} threads):\n")
    print(f"{'cache':<22} {'answer':<18} {'right':<6} {'rows kept':>10} {'KV resident':>12} {'prompt tok/s':>13} "
          f"{'decode tok/s':>13}")
    full_rows = None
    for label, extra in configs:
        r = run(args.squeezekv, args.model, prompt_file, extra + ["-t", args.threads])
        answer = r["text"].strip().replace("\n", " ")
        rows = sum(r["layer_kept"])
        full_rows = full_rows or rows
        print(f"{label:<22} {answer[:18]:<18} {'yes' if args.key in answer else 'no':<6} "
              f"{100.0 * rows / full_rows:>9.1f}% {r['kv_kept_bytes'] / 2**20:>8.2f} MiB "
              f"{r['prompt_tokens_per_second']:>13.1f} {r['decode_tokens_per_second']:>13.1f}")
    print(f"\n(the prompt: {r['prompt_tokens']} tokens; 'rows kept' counts K/V rows against the full cache's)")

    print("\nA short chat reply through the model's chat template:\n")
    chat = [args.squeezekv, "generate", "-m", args.model, "--chat", "-n", "48", "-t", args.threads,
            "--method", "squeeze", "--budget", "256", "-p", "Write one sentence about the sea."]
    print("> Write one sentence about the sea.")
    subprocess.run(chat, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
