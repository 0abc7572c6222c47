#!/usr/bin/python3
"""Turns `squeezekv sweep --stream --json` files into markdown: per budget, every method's stream
perplexity with --positions cache and text, its ratio to the sliding window's (same budget, same
rule), and the drift of that ratio from the first 16,384-token segment to the last; then each
method's perplexity per segment.

usage: scripts/stream_tables.py STREAM.json [STREAM.json ...] > tables.md
"""
import json
import sys
from collections import defaultdict


def method_label(r):
    return r["method"] + ("" if r["score"] == "attention" or r["policy"] in ("window", "streaming") else " " + r["score"])


def main():
    rows = []
    tokens = warmup = segment = None
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        tokens, warmup, segment = doc["text_tokens"], doc["warmup"], doc["segment"]
        rows += doc["results"]
    by = defaultdict(dict)  # (budget, positions) -> method -> row
    for r in rows:
        by[(r["budget"], r["positions"])][method_label(r)] = r
    print(f"Stream of {tokens} tokens, warm-up {warmup}, segments of {segment} scored tokens.\n")
    budgets = sorted({b for b, _ in by})
    for budget in budgets:
        cache, text = by.get((budget, "cache"), {}), by.get((budget, "text"), {})
        window = cache.get("window")
        print(f"### Budget {budget}\n")
        print("| method | PPL, cache positions | / window | drift of / window, first to last segment | PPL, text positions | KV KiB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for m in sorted(set(cache) | set(text), key=lambda m: cache.get(m, text.get(m))["perplexity"]):
            c, t = cache.get(m), text.get(m)
            ratio = drift = ""
            if c and window:
                ratio = "{:.3f}".format(c["perplexity"] / window["perplexity"])
                first = c["segments"][0]["perplexity"] / window["segments"][0]["perplexity"]
                last = c["segments"][-1]["perplexity"] / window["segments"][-1]["perplexity"]
                drift = "{:+.1f} %".format(100 * (last / first - 1))
            print("| {} | {} | {} | {} | {} | {:.1f} |".format(
                m, "{:.4f}".format(c["perplexity"]) if c else "", ratio, drift,
                "{:.4f}".format(t["perplexity"]) if t else "", (c or t)["mean_kept_bytes"] / 1024))
        print()


if __name__ == "__main__":
    main()
