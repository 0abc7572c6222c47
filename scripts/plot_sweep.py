#!/usr/bin/python3
"""Plots a `squeezekv sweep --json` file: perplexity and KL divergence against mean resident KV
bytes, one line per method variant (budgets along each line). Writes PNG and SVG.

usage: scripts/plot_sweep.py SWEEP.json OUT_DIR [--title TEXT]
"""
import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_json")
    parser.add_argument("out_dir")
    parser.add_argument("--title", default="")
    parser.add_argument("--filter", default="", help="only variants containing this text")
    args = parser.parse_args()
    with open(args.sweep_json) as f:
        doc = json.load(f)
    rows = doc["results"]
    os.makedirs(args.out_dir, exist_ok=True)
    full = [r for r in rows if r["policy"] == "full"]
    lines = defaultdict(list)
    for r in rows:
        # Position-only methods (no score source) stay in every filtered plot as baselines.
        baseline = r["policy"] in ("streaming", "window")
        if r["policy"] != "full" and (args.filter in r["variant"] or baseline):
            lines[r["variant"]].append(r)
    for metric, label, name in (("perplexity", "perplexity", "ppl"),
                                ("mean_kl", "KL(full || method), nats/token", "kl")):
        fig, ax = plt.subplots(figsize=(10, 6.5))
        colors = plt.get_cmap("tab20").colors
        for i, variant in enumerate(sorted(lines)):
            pts = sorted(lines[variant], key=lambda r: r["mean_kept_bytes"])
            ax.plot([p["mean_kept_bytes"] / 1024 for p in pts], [p[metric] for p in pts],
                    marker="os^D"[i // 10 % 4], linewidth=1.2, markersize=3,
                    color=colors[i % len(colors)], linestyle="-" if i < 20 else "--", label=variant)
        if full and metric == "perplexity":
            ax.axhline(full[0]["perplexity"], color="black", linestyle="--", linewidth=1,
                       label="full cache")
        ax.set_xscale("log", base=2)
        if metric == "mean_kl":
            ax.set_yscale("log")
        ax.set_xlabel("mean resident KV cache (KiB)")
        ax.set_ylabel(label)
        ax.set_title(args.title or f"{os.path.basename(doc['model'])}, n_ctx {doc['n_ctx']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="upper right", ncol=1)
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(os.path.join(args.out_dir, f"{name}_vs_memory.{ext}"), dpi=130)
        plt.close(fig)


if __name__ == "__main__":
    main()
