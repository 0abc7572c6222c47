"""docs/figures/*.svg for docs/results.md, drawn from the docs/data files (ResultsData)."""
import math
import os

from . import speed
from .plotting import plt, save
from .results_data import SHARES, SQUEEZE

COLORS = {"full": "black", "window": "#999999", "streaming": "#bbbbbb", "h2o": "#1f77b4", "tova": "#17becf",
          "snapkv": "#2ca02c", "pyramidkv": "#8c564b", SQUEEZE: "#d62728", "squeeze (hidden cosine)": "#ff9896",
          "chunkkv": "#9467bd", "knorm": "#bcbd22", "kvzip": "#ff7f0e", "snapkv --kernel 31": "#98df8a",
          "squeeze_snapkv --kernel 31": "#e377c2"}
STORAGE_COLORS = {"f16": "black", "q8_0": "#1f77b4", "kivi4": "#2ca02c", "q4_0": "#d62728", "kivi2": "#9467bd"}


def share_axis(ax, ylabel):
    ax.set_xscale("log")
    ax.set_xticks([2, 5, 10, 20, 40], ["2", "5", "10", "20", "40"])
    ax.set_xlabel("K/V memory, % of the full cache's")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.minorticks_off()


def needle_lines(data, mode, out_dir):
    keys = sorted(k for k in data.grid if k[0] == mode)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.6), sharey=True, squeeze=False)
    for ax, key in zip(axes[0], keys):
        grid = data.grid[key]
        for method, cells in grid.items():
            if method == "full":
                ax.axhline(cells[None], color="black", linestyle="--", linewidth=1, label="full cache")
                continue
            xs = [s for s in SHARES if s in cells]
            style = dict(color=COLORS.get(method), linewidth=2.2 if method == SQUEEZE else 1, label=method)
            if len(xs) == 1:
                ax.plot(xs, [cells[xs[0]]], marker="*", markersize=10, linestyle="none", **style)
            else:
                ax.plot(xs, [cells[s] for s in xs], marker="o" if method == SQUEEZE else None, markersize=4, **style)
        if mode == "query-agnostic":
            kv = [(k[0], k[2], v) for k, v in data.read_once.items() if k[1] == "kvzip" and k[3] == 1]
            near = [(s, f, o, n) for n, s, (f, o, _) in kv if abs(n - key[1]) < 64]
            for s, f, o, n in near:
                ax.plot([s], [100 * f / o], marker="*", markersize=11, color=COLORS["kvzip"], linestyle="none",
                        label="kvzip (read once)" + ("" if n == key[1] else f", {n} tokens, 3 depths"))
            if key[1] == 4096:
                for r in data.needle_storage["rows"]:
                    if r["method"] == "full" and r["storage"] != "f16":
                        ax.plot([r["kv_share_pct"]], [r["accuracy_pct"]], marker="s", markersize=5, linestyle="none",
                                color=STORAGE_COLORS[r["storage"]], label=f"full cache in {r['storage']}")
        ax.set_title(f"{key[1]:,} tokens", fontsize=10)
        share_axis(ax, "needles found, %" if ax is axes[0][0] else "")
        ax.set_xlim(1.5, 70)
        ax.set_ylim(-5, 105)
    handles = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    rows = math.ceil(len(handles) / 4)
    height = 3.3 + 0.16 * rows
    fig.set_size_inches(3.2 * len(keys), height)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(f"SmolLM2-135M, single needle, {mode}: accuracy against K/V memory", fontsize=11)
    fig.tight_layout(rect=(0, (0.16 * rows + 0.08) / height, 1, 1))
    name = "needle_" + mode.replace("-", "_")
    save(fig, out_dir, name, formats=("svg",))
    return name + ".svg"


HEATMAP_TITLES = {"full": "full cache", SQUEEZE: "squeeze, 10 %", "kvzip": "kvzip, 10 %", "h2o": "h2o, 10 %",
                  "snapkv --kernel 31": "snapkv kernel 31, 10 %",
                  "squeeze_snapkv --kernel 31": "squeeze_snapkv k. 31, 10 %"}


def needle_heatmaps(data, out_dir):
    """Needles found by depth (rows) and length (columns, 8k: 8,176 tokens for kvzip, 8,192 else)."""
    panels = [("query-agnostic", ["full", "kvzip", "h2o", SQUEEZE]),
              ("query-aware", ["full", "snapkv --kernel 31", "squeeze_snapkv --kernel 31", SQUEEZE])]
    depths = (0, 0.25, 0.5, 0.75, 1)
    fig, axes = plt.subplots(2, 4, figsize=(11, 5.6))
    image = None
    for row, (mode, methods) in zip(axes, panels):
        lengths = sorted({round(k[1] / 1024) for k in data.depths if k[0] == mode and k[2] in methods})
        for ax, method in zip(row, methods):
            grid = [[float("nan")] * len(lengths) for _ in depths]
            cells = sorted(((k, v) for k, v in data.depths.items()
                            if k[0] == mode and k[2] == method and k[3] in (None, 10)), key=lambda kv: -kv[0][1])
            for (_, length, _, _, depth), (found, of) in cells:
                i, j = depths.index(depth), lengths.index(round(length / 1024))
                if math.isnan(grid[i][j]):
                    grid[i][j] = 100 * found / of
            image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto", interpolation="none")
            for i, line in enumerate(grid):
                for j, v in enumerate(line):
                    ax.text(j, i, "-" if math.isnan(v) else f"{v:.0f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(lengths)), [f"{n}k" for n in lengths], fontsize=8)
            ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=8)
            ax.set_title(HEATMAP_TITLES.get(method, method), fontsize=9)
            if ax is row[0]:
                ax.set_ylabel(f"{mode}\nneedle depth", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.7, label="needles found, %")
    fig.suptitle("SmolLM2-135M: needles found by depth and prompt length, % of 2 (-: not run; kvzip's 8k: 8,176 "
                 "tokens)", fontsize=10)
    save(fig, out_dir, "needle_heatmap", formats=("svg",))
    return "needle_heatmap.svg"


def books_kl(data, out_dir):
    ctxs = sorted(data.books)
    fig, axes = plt.subplots(2, len(ctxs), figsize=(5 * len(ctxs), 7.2), squeeze=False)
    for j, ctx in enumerate(ctxs):
        kl = data.book_kl(ctx)
        for i, (book, index) in enumerate((("Emma", 0), ("King James Bible", 1))):
            ax = axes[i][j]
            for method, cells in kl.items():
                xs = [s for s in SHARES if s in cells]
                if method == "full" or not xs:
                    continue
                ax.plot(xs, [cells[s][index] for s in xs], marker="o" if method == SQUEEZE else None, markersize=4,
                        color=COLORS.get(method),
                        linewidth=2.2 if method == SQUEEZE else 1, label=method)
            ax.set_yscale("log")
            ax.set_title(f"{book}, n_ctx {ctx}", fontsize=10)
            share_axis(ax, "KL from the full cache, nats/token")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.suptitle("SmolLM2-135M on two books: KL against K/V memory (equal rows, equal bytes)", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, out_dir, "books_kl", formats=("svg",))
    return "books_kl.svg"


def storage_kl(data, out_dir):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    mid = lambda v: sum(v) / len(v) if isinstance(v, list) else v  # noqa: E731  (a range drawn at its middle)
    for ax, (book, key) in zip(axes, (("Emma", "kl_emma"), ("King James Bible", "kl_kjv"))):
        for store, color in STORAGE_COLORS.items():
            rows = [r for r in data.storage["rows"] if r["storage"] == store and "kv_share_pct" in r]
            sq = sorted((mid(r["kv_share_pct"]), r[key]) for r in rows if r["method"] == "squeeze")
            ax.plot([x for x, _ in sq], [y for _, y in sq], marker="o", markersize=3, color=color,
                    label=f"squeeze over {store}")
            full = [r for r in rows if r["method"] == "full" and r[key] > 0]
            for r in full:
                ax.plot([mid(r["kv_share_pct"])], [r[key]], marker="s", markersize=7, color=color, linestyle="none",
                        label=f"full cache in {store}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks([1, 3, 10, 30, 100], ["1", "3", "10", "30", "100"])
        ax.minorticks_off()
        ax.set_xlabel("K/V memory, % of the f16 full cache's bytes")
        ax.set_ylabel("KL from the f16 full cache, nats/token")
        ax.set_title(book, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
    fig.suptitle(f"SmolLM2-135M, {data.storage['title']}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    save(fig, out_dir, "storage_kl", formats=("svg",))
    return "storage_kl.svg"


def speed_ratios(data, out_dir):
    cells = speed.newest_cells(data.speed)
    cpus = speed.cpu_labels(data.speed)
    cols = [(0, "full"), (4096, "full"), (4096, "squeeze"), (8192, "full"), (8192, "squeeze")]
    groups = [(m, t) for m in speed.MODELS for t in speed.TESTS]
    fig, axes = plt.subplots(len(cpus), 1, figsize=(10, 2.6 * len(cpus)), sharex=True, squeeze=False)
    width = 0.16
    colors = ["#555555", "#1f77b4", "#aec7e8", "#d62728", "#ff9896"]
    for ax, cpu in zip(axes[:, 0], cpus):
        for k, (col, color) in enumerate(zip(cols, colors)):
            xs, ys = [], []
            for g, (model, test) in enumerate(groups):
                cell = cells.get((cpu, model, test) + col)
                if cell:
                    xs.append(g + (k - 2) * width)
                    ys.append(cell.ratio)
            ax.bar(xs, ys, width, color=color, label=speed.column_label(*col))
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylim(0.8, 30)
        ax.set_yticks([1, 2, 5, 10, 20], ["1x", "2x", "5x", "10x", "20x"])
        ax.minorticks_off()
        ax.set_ylabel("squeezekv / llama.cpp")
        ax.set_title(cpu, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1][0].set_xticks(range(len(groups)), [f"{m.split(' Q')[0]}\n{t}" for m, t in groups], fontsize=7)
    axes[0][0].legend(fontsize=7, ncol=5, loc="upper right")
    fig.suptitle("Speed against llama.cpp, 2 threads (tokens/s over llama.cpp's; squeeze: 10 % of the depth's rows)",
                 fontsize=10)
    fig.tight_layout()
    save(fig, out_dir, "speed_ratios", formats=("svg",))
    return "speed_ratios.svg"


def write_all(data, out_dir):
    """Every figure; returns their file names."""
    os.makedirs(out_dir, exist_ok=True)
    return [needle_lines(data, "query-aware", out_dir), needle_lines(data, "query-agnostic", out_dir),
            needle_heatmaps(data, out_dir), books_kl(data, out_dir), storage_kl(data, out_dir),
            speed_ratios(data, out_dir)]
