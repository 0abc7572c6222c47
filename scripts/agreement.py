#!/usr/bin/env python3
"""squeezekv against llama.cpp on one model: token ids, greedy text and chunked perplexity.

Needs a llama.cpp build of your own (outside this repository; ../shared/docs/reference-figures.md
says how) and squeezekv's build (the program and the Python module in build/python). For SmolLM2
the same checks run in CI as tests/engine/smollm2_agreement_test.cc; this script runs them on any
model, e.g. the 1.5B Qwen model:

  /usr/bin/python3 scripts/agreement.py --llama-cpp ../llama.cpp/build/bin \\
      --model ~/.cache/squeezekv/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --chunks 4

It prints one line per check and a summary; exit status 1 when a check fails.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "build", "python"))

TEXTS = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "In 2024, the population was 8,123,456 people.",
    "3.14159 2.71828 1e-10 0x1F 007", "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }", "  leading spaces", "trailing spaces   ",
    "multiple   spaces   between", "line one\nline two\n\nline four", "\n\n\n", "\t tab\tseparated\tvalues",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u4e2d\u6587\u6587\u672c\uff0c\u5305\u542b\u6807\u70b9\u7b26\u53f7\u3002", "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4",
    "Emoji: \U0001F600\U0001F389\U0001F44D\U0001F3FD and \u2764\ufe0f", "It's, don't, I'll, we've, they're, she'd",
    "URL: https://example.com/path?query=1&x=y#frag", "$100.00 \u20ac50 \u00a320 \u00a51000",
    "<|im_start|>user\nhello<|im_end|>", "a<|im_end|>b <|endoftext|>",
]
PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1969, Neil Armstrong"]


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"agreement: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return done.stdout, done.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True, help="folder with llama-tokenize, llama-simple, llama-perplexity")
    ap.add_argument("--model", required=True)
    ap.add_argument("--squeezekv", default=os.path.join(HERE, "..", "build", "squeezekv"))
    ap.add_argument("--text", default=os.path.join(HERE, "..", "..", "shared", "data", "tinystories_val.txt"))
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--threads", default="2")
    args = ap.parse_args()
    import squeezekv

    failures = 0
    model = squeezekv.Model.load(args.model)
    bin_ = lambda name: os.path.join(args.llama_cpp, name)
    same = 0
    for t in TEXTS:
        out, _ = run([bin_("llama-tokenize"), "-m", args.model, "-p", t, "--ids", "--log-disable", "--no-bos",
                      "--no-escape", "--no-parse-special"])
        theirs = json.loads(out.strip().splitlines()[-1])
        ours = model.tokenize(t, False)
        same += ours == theirs
        if ours != theirs:
            print(f"tokens differ for {t!r}: {ours} against {theirs}")
    print(f"token ids: {same} of {len(TEXTS)} texts equal llama-tokenize's")
    failures += same != len(TEXTS)

    same = 0
    for p in PROMPTS:
        out, _ = run([bin_("llama-simple"), "-m", args.model, "-n", "48", p])
        theirs = out
        ours, _ = run([args.squeezekv, "generate", "-m", args.model, "-p", p, "-n", "48", "--temp", "0",
                       "-t", args.threads])
        a, b = ours.strip(), theirs.strip()
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        same += a == b
        print(f"greedy {p!r}: {'equal' if a == b else f'parts after {n} characters'} "
              f"(llama-simple's F16 cache; ours {len(a)} characters, theirs {len(b)})")
    print(f"greedy text: {same} of {len(PROMPTS)} prompts equal over 48 tokens")

    _, err = run([bin_("llama-perplexity"), "-m", args.model, "-f", args.text, "-c", str(args.ctx), "-b", str(args.ctx),
                  "--chunks", str(args.chunks), "-fa", "off", "-ctk", "f32", "-ctv", "f32", "-t", args.threads])
    theirs = float(re.search(r"Final estimate: PPL = ([0-9.]+)", err).group(1))
    out, _ = run([args.squeezekv, "perplexity", "-m", args.model, "-f", args.text, "-c", str(args.ctx), "--chunks",
                  str(args.chunks), "--kv-type", "f32", "-t", args.threads, "--json"])
    ours = json.loads(out)["perplexity"]
    rel = ours / theirs - 1
    print(f"perplexity -c {args.ctx} x {args.chunks} chunks: {ours:.4f} against {theirs:.4f} ({100 * rel:+.3f} %)")
    failures += abs(rel) > 0.002
    print("agreement: " + ("all checks hold" if failures == 0 else f"{failures} check(s) failed"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
