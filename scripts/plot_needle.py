#!/usr/bin/python3
"""Plots a `squeezekv needle --json` file (one JSON object per cell, a line each): a heatmap of
accuracy over depth (rows) and length (columns) per variant and budget, and accuracy (averaged
over lengths and depths) against mean resident K/V bytes, one line per variant. Writes PNG and SVG.

usage: scripts/plot_needle.py NEEDLE.jsonl OUT_DIR [--title TEXT]
"""
import argparse
import json
import math
import os
import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read_cells(path):
    cells = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                cells.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by an interrupted run
    return cells


def budget_key(cell):
    """A cell's budget for grouping: its share of the prompt's rows when the grid ran with
    --budget-shares (the budget then differs per length), else its budget in rows (0: full)."""
    share = cell.get("budget_share")
    if share is not None and cell["budget"] != 0:
        return round(share, 2)
    return cell["budget"]


def budget_label(key):
    return f"{100 * key:g} % of the rows" if isinstance(key, float) else f"budget {key}"


def save(fig, out_dir, name):
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out_dir, f"{name}.{ext}"), dpi=120 if ext == "png" else None)
    plt.close(fig)


def heatmaps(cells, out_dir, title, prefix="needle"):
    groups = defaultdict(list)
    for c in cells:
        groups[(c["variant"], budget_key(c))].append(c)
    lengths = sorted({c["length"] for c in cells})
    depths = sorted({c["depth"] for c in cells})
    keys = sorted(groups, key=lambda k: (k[1] != 0, k[0], k[1]))
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.0 * rows), squeeze=False)
    fig.subplots_adjust(hspace=0.7, wspace=0.45, right=0.8)
    image = None
    for ax, key in zip(axes.flat, keys):
        grid = [[float("nan")] * len(lengths) for _ in depths]
        for c in groups[key]:
            grid[depths.index(c["depth"])][lengths.index(c["length"])] = c["accuracy"]
        image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto", origin="upper")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=8)
        variant, budget = key
        label = variant if budget == 0 else f"{variant}, {budget_label(budget)}"
        ax.set_title(textwrap.fill(label, 40), fontsize=8)
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=8)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=8)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("needle depth")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy")
    fig.suptitle(title or f"needle: {cells[0]['task']}, accuracy by depth and length")
    save(fig, out_dir, f"{prefix}_heatmap")


def memory(cells, out_dir, title, prefix="needle"):
    points = defaultdict(lambda: defaultdict(list))  # variant -> budget -> cells
    for c in cells:
        points[c["variant"]][budget_key(c)].append(c)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for variant in sorted(points):
        xs, ys = [], []
        for budget in sorted(points[variant], key=float):
            group = points[variant][budget]
            xs.append(sum(c["kv_bytes"] for c in group) / len(group) / 2**20)
            ys.append(sum(c["accuracy"] * c["samples"] for c in group) / sum(c["samples"] for c in group))
        ax.plot(xs, ys, marker="o", label=variant)
    ax.set_xscale("log")
    ax.set_xlabel("mean resident K/V (MiB, log scale)")
    ax.set_ylabel("accuracy (all lengths and depths)")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"needle: {cells[0]['task']}, accuracy against K/V memory")
    save(fig, out_dir, f"{prefix}_memory")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("needle_jsonl")
    parser.add_argument("out_dir")
    parser.add_argument("--title", default="")
    parser.add_argument("--prefix", default="needle", help="file name prefix of the plots")
    args = parser.parse_args()
    cells = read_cells(args.needle_jsonl)
    if not cells:
        raise SystemExit(f"plot_needle: {args.needle_jsonl} holds no cell")
    os.makedirs(args.out_dir, exist_ok=True)
    heatmaps(cells, args.out_dir, args.title, args.prefix)
    memory(cells, args.out_dir, args.title, args.prefix)
    print(f"wrote {args.out_dir}/{args.prefix}_heatmap.png/.svg and {args.prefix}_memory.png/.svg")


if __name__ == "__main__":
    main()
