#!/usr/bin/python3
"""Turns `squeezekv sweep --stream --json` files into markdown: per budget, every method's stream
perplexity under each position rule present (span, cache, text), its ratio to the sliding
window's (same budget, same rule), and the drift of that ratio from the first segment to the
last.

usage: scripts/stream_tables.py STREAM.json [STREAM.json ...] > tables.md
"""
import json
import sys
from collections import defaultdict

RULES = ["span", "cache", "text"]  # the columns, in this order, for the rules present


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
    rules = [r for r in RULES if any(key[1] == r for key in by)]
    for budget in budgets:
        per_rule = {rule: by.get((budget, rule), {}) for rule in rules}
        print(f"### Budget {budget}\n")
        head, line = ["method"], ["---"]
        for rule in rules:
            head += [f"PPL, {rule} positions"]
            line += ["---:"]
            if rule != "text":
                head += ["/ window", "drift of / window, first to last segment"]
                line += ["---:", "---:"]
        print("| " + " | ".join(head + ["KV KiB"]) + " |")
        print("| " + " | ".join(line + ["---:"]) + " |")
        methods = set().union(*per_rule.values())
        first = per_rule[rules[0]]

        def key(m):
            row = first.get(m) or next(p[m] for p in per_rule.values() if m in p)
            return row["perplexity"]

        for m in sorted(methods, key=key):
            cells = [m]
            any_row = None
            for rule in rules:
                r, window = per_rule[rule].get(m), per_rule[rule].get("window")
                any_row = any_row or r
                cells.append("{:.4f}".format(r["perplexity"]) if r else "")
                if rule == "text":
                    continue
                if r and window:
                    a = r["segments"][0]["perplexity"] / window["segments"][0]["perplexity"]
                    b = r["segments"][-1]["perplexity"] / window["segments"][-1]["perplexity"]
                    cells += ["{:.3f}".format(r["perplexity"] / window["perplexity"]), "{:+.1f} %".format(100 * (b / a - 1))]
                else:
                    cells += ["", ""]
            cells.append("{:.1f}".format(any_row["mean_kept_bytes"] / 1024))
            print("| " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
