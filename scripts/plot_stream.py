#!/usr/bin/python3
"""Plots `squeezekv sweep --stream --json` files (StreamingLLM's figure): perplexity per segment
against the position in the stream, one line per method, one figure per (budget, position rule).
Writes PNG and SVG.

usage: scripts/plot_stream.py STREAM_DIR OUT_DIR   (every *.json in STREAM_DIR)
"""
import argparse
import glob
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream_dir")
    parser.add_argument("out_dir")
    args = parser.parse_args()
    groups = defaultdict(list)  # (budget, positions) -> rows
    reference = []  # the window at larger budgets, drawn on every figure
    for path in sorted(glob.glob(os.path.join(args.stream_dir, "*.json"))):
        with open(path) as f:
            for r in json.load(f)["results"]:
                groups[(r["budget"], r["positions"])].append(r)
    os.makedirs(args.out_dir, exist_ok=True)
    budgets = sorted({b for b, _ in groups})
    for (budget, positions), rows in sorted(groups.items()):
        if len(rows) == 1 and rows[0]["method"] == "window" and budget == max(budgets):
            reference = rows
    for (budget, positions), rows in sorted(groups.items()):
        if len(rows) == 1:
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        for r in rows + [dict(x, method=f"window b{x['budget']} (reference)") for x in reference]:
            xs = [s["first"] + s["scored"] / 2 for s in r["segments"]]
            ys = [s["perplexity"] for s in r["segments"]]
            ax.plot(xs, ys, marker=".", label=r["method"])
        ax.set_yscale("log")
        ax.set_xlabel("position in the stream (tokens)")
        ax.set_ylabel("perplexity per segment")
        ax.set_title(f"stories260K, TinyStories as one stream: budget {budget}, positions {positions}")
        ax.axvline(512, color="grey", linestyle=":", linewidth=1)  # the trained context
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        for ext in ("png", "svg"):
            fig.savefig(os.path.join(args.out_dir, f"stream_b{budget}_{positions}.{ext}"), dpi=120)
        plt.close(fig)


if __name__ == "__main__":
    main()
