"""`squeezekv needle --json` cells: heatmaps of accuracy over depth and length, accuracy against
resident K/V bytes, and tables of accuracy beside the K/V bytes as a share of the f16 full cache's."""
import math
import re
import textwrap
from collections import defaultdict

from .plotting import plt, save


def budget_key(cell):
    """A cell's budget for grouping: its share of the prompt's rows when the grid ran with
    --budget-shares (the budget then differs per length), else its budget in rows (0: full)."""
    share = cell.get("budget_share")
    if share is not None and cell["budget"] != 0:
        return round(share, 2)
    return cell["budget"]


def budget_label(key):
    return f"{100 * key:g} % of the rows" if isinstance(key, float) else f"budget {key}"


def heatmaps(cells, out_dir, title, prefix="needle"):
    """OUT_DIR/PREFIX_heatmap.{png,svg}: accuracy by depth (rows) and length (columns), one panel
    per variant and budget."""
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
    """OUT_DIR/PREFIX_memory.{png,svg}: accuracy over every length and depth against the mean
    resident K/V, one line per variant (its budgets along it)."""
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


def share_plots(cells, plot_dir, prefix, title):
    """The memory plot of every variant, and one heatmap figure per budget share (with the full
    cache beside it) so that each figure stays readable."""
    memory(cells, plot_dir, title, prefix)
    full = [c for c in cells if c["budget"] == 0]
    for share in sorted({budget_key(c) for c in cells if c["budget"] != 0}):
        subset = full + [c for c in cells if c["budget"] != 0 and budget_key(c) == share]
        name = f"{prefix}_{round(100 * share)}pct" if isinstance(share, float) else f"{prefix}_{share}"
        heatmaps(subset, plot_dir, f"{title}, {budget_label(share)}", name)


def pct(x):
    return f"{100 * x:.0f} %"


def reference_key(c):
    return (c["model"], c["length"], c["question_in_prompt"])


def f16_references(files):
    """The full f16 cache's bytes per (model, length, question placement): any f16 cell's
    full_kv_bytes, from every result file, so that a file without f16 cells (the storage grid)
    is measured against the same f16 cache as the others."""
    seen = defaultdict(list)
    for cells in files:
        for c in cells:
            if c["kv_type"] == "f16":
                seen[reference_key(c)].append(c["full_kv_bytes"])
    return {key: sum(v) / len(v) for key, v in seen.items()}


def tables(cells, title, references):
    """Accuracy by variant (rows) and budget share (columns), over every length and depth, then
    one table per length; each cell `accuracy (K/V bytes as a share of the full f16 cache's)`, the
    share left out where no f16 cell of that model and length was measured."""
    shares = sorted({budget_key(c) for c in cells if c["budget"] != 0})
    lengths = sorted({c["length"] for c in cells})
    out = [f"### {title}", ""]

    # A method's id names it where the file holds one variant of it; else its variant string.
    # snapkv's window, capped at half of a small budget, is not a variant of its own here.
    def base(variant):
        return re.sub(r" window=\d+", "", variant)

    variants_of = defaultdict(set)
    for c in cells:
        variants_of[c["method"]].add(base(c["variant"]))
    label = {c["variant"]: c["method"] if len(variants_of[c["method"]]) == 1 else base(c["variant"]) for c in cells}
    scopes = [("all lengths", lengths)] + [(f"{n} tokens", [n]) for n in lengths] if len(lengths) > 1 else [
        (f"{lengths[0]} tokens", lengths)
    ]
    for scope, scope_lengths in scopes:
        groups = defaultdict(list)
        for c in cells:
            if c["length"] in scope_lengths:
                key = budget_key(c)
                # The variant names a K/V type other than f16 ("kv=q8_0") unless the method id stands for it.
                variant = label[c["variant"]]
                if c["kv_type"] != "f16" and "kv=" not in variant:
                    variant += f' kv={c["kv_type"]}'
                groups[(variant, key)].append(c)
        variants = sorted({v for v, _ in groups}, key=lambda v: (not v.startswith("full"), v))
        out.append(f"{scope}: exact-match accuracy (mean resident K/V as a share of the full f16 cache's)")
        out.append("")
        out.append("| variant | " + " | ".join(pct(s) for s in shares) + " | no eviction |")
        out.append("| --- |" + " ---: |" * (len(shares) + 1))
        for variant in variants:
            row = [variant]
            for key in shares + [0]:
                group = groups.get((variant, key))
                if not group:
                    row.append("")
                    continue
                samples = sum(c["samples"] for c in group)
                accuracy = sum(c["accuracy"] * c["samples"] for c in group) / samples
                full = [references.get(reference_key(c)) for c in group]
                if None in full:
                    row.append(pct(accuracy))
                    continue
                share = sum(c["kv_bytes"] for c in group) / len(group) / (sum(full) / len(full))
                row.append(f"{pct(accuracy)} ({pct(share)})")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return out
