#!/usr/bin/python3
"""Turns `squeezekv sweep --json` files into markdown tables: one table per budget with every
variant's perplexity, KL divergence from the full cache, top-1 agreement and mean resident KV
memory, sorted by KL.

usage: scripts/sweep_tables.py SWEEP.json [SWEEP.json ...] > tables.md
"""
import json
import sys
from collections import defaultdict


def table(rows):
    out = ["| variant | PPL | KL (nats/token) | top-1 | mean KV KiB | of unevicted |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: r["mean_kl"]):
        out.append("| {} | {:.4f} | {:.5f} | {:.2f} % | {:.1f} | {:.1f} % |".format(
            r["variant"], r["perplexity"], r["mean_kl"], 100 * r["top1_agreement"],
            r["mean_kept_bytes"] / 1024, 100 * r["mean_kept_bytes"] / r["mean_full_bytes"]))
    return "\n".join(out)


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        rows = doc["results"]
        first = rows[0]
        print(f"### {path.rsplit('/', 1)[-1]}: n_ctx {doc['n_ctx']}, {first['chunks']} chunks, "
              f"{first['scored']} scored tokens per configuration\n")
        full = next((r for r in rows if r["policy"] == "full"), None)
        if full:
            print(f"Full cache: PPL {full['perplexity']:.4f}, mean resident KV "
                  f"{full['mean_kept_bytes'] / 1024:.1f} KiB (an unevicted cache holds "
                  f"{full['mean_full_bytes'] / 1024:.1f} KiB on average over the scored steps).\n")
        by_budget = defaultdict(list)
        for r in rows:
            if r["policy"] != "full":
                by_budget[r["budget"]].append(r)
        for budget in sorted(by_budget):
            print(f"#### Average budget {budget} rows per layer and KV head\n")
            print(table(by_budget[budget]))
            print()


if __name__ == "__main__":
    main()
