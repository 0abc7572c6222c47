"""`squeezekv sweep --json` files: tables per budget, perplexity and KL against resident memory,
and eviction x K/V storage at equal memory (the Pareto front)."""
import os
import re
from collections import defaultdict

from .load import ReportError, load_sweep
from .plotting import plt, save

TABLE_KEYS = ("variant", "policy", "budget", "perplexity", "mean_kl", "top1_agreement", "mean_kept_bytes",
              "mean_full_bytes", "chunks", "scored")


def table(rows):
    out = ["| variant | PPL | KL (nats/token) | top-1 | mean KV KiB | of unevicted |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: r["mean_kl"]):
        out.append("| {} | {:.4f} | {:.5f} | {:.2f} % | {:.1f} | {:.1f} % |".format(
            r["variant"], r["perplexity"], r["mean_kl"], 100 * r["top1_agreement"],
            r["mean_kept_bytes"] / 1024, 100 * r["mean_kept_bytes"] / r["mean_full_bytes"]))
    return out


def sweep_tables(paths):
    """Markdown: one table per budget with every variant's perplexity, KL divergence from the full
    cache, top-1 agreement and mean resident KV memory, sorted by KL."""
    out = []
    for path in paths:
        doc = load_sweep(path, TABLE_KEYS)
        rows = doc["results"]
        if not rows:
            raise ReportError(f"{path}: a sweep with no result")
        first = rows[0]
        out += [f"### {path.rsplit('/', 1)[-1]}: n_ctx {doc['n_ctx']}, {first['chunks']} chunks, "
                f"{first['scored']} scored tokens per configuration", ""]
        full = next((r for r in rows if r["policy"] == "full"), None)
        if full:
            out += [f"Full cache: PPL {full['perplexity']:.4f}, mean resident KV "
                    f"{full['mean_kept_bytes'] / 1024:.1f} KiB (an unevicted cache holds "
                    f"{full['mean_full_bytes'] / 1024:.1f} KiB on average over the scored steps).", ""]
        by_budget = defaultdict(list)
        for r in rows:
            if r["policy"] != "full":
                by_budget[r["budget"]].append(r)
        for budget in sorted(by_budget):
            out += [f"#### Average budget {budget} rows per layer and KV head", ""]
            out += table(by_budget[budget])
            out.append("")
    return out


def sweep_plots(path, out_dir, title="", text_filter=""):
    """OUT_DIR/ppl_vs_memory and kl_vs_memory (PNG and SVG): one line per method variant, its
    budgets along it; position-only methods stay in a filtered plot as baselines."""
    doc = load_sweep(path, ("variant", "policy", "perplexity", "mean_kl", "mean_kept_bytes"))
    rows = doc["results"]
    os.makedirs(out_dir, exist_ok=True)
    full = [r for r in rows if r["policy"] == "full"]
    lines = defaultdict(list)
    for r in rows:
        baseline = r["policy"] in ("streaming", "window")
        if r["policy"] != "full" and (text_filter in r["variant"] or baseline):
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
            ax.axhline(full[0]["perplexity"], color="black", linestyle="--", linewidth=1, label="full cache")
        ax.set_xscale("log", base=2)
        if metric == "mean_kl":
            ax.set_yscale("log")
        ax.set_xlabel("mean resident KV cache (KiB)")
        ax.set_ylabel(label)
        ax.set_title(title or f"{os.path.basename(doc['model'])}, n_ctx {doc['n_ctx']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="upper right", ncol=1)
        fig.tight_layout()
        save(fig, out_dir, f"{name}_vs_memory", dpi=130)


def storage(variant):
    """K/V formats from a sweep label: 'kv=q8_0 v=q4_0' -> 'K q8_0, V q4_0'."""
    kv = re.search(r"\bkv=(\S+)", variant)
    k = re.search(r"\bk=(\S+)", variant)
    v = re.search(r"\bv=(\S+)", variant)
    base = kv.group(1) if kv else "f16"
    key, value = (k.group(1) if k else base), (v.group(1) if v else base)
    return f"K+V {key}" if key == value else f"K {key}, V {value}"


def pareto(rows):
    """Rows on the front: no other row has both fewer bytes and a lower KL."""
    front, best = [], float("inf")
    for r in sorted(rows, key=lambda r: (r["mean_kept_bytes"], r["mean_kl"])):
        if r["mean_kl"] < best:
            front.append(r)
            best = r["mean_kl"]
    return front


def pareto_report(out_dir, paths):
    """Eviction, quantization, both, at equal memory: OUT_DIR/pareto_kl_vs_memory (PNG and SVG),
    every configuration's KL against its mean resident bytes (colour: K/V storage, marker:
    method) with the Pareto front; returns the Markdown of the best configuration at fractions of
    the unevicted f16 cache's memory and of the front."""
    rows, model, n_ctx = [], "", 0
    for path in paths:
        doc = load_sweep(path, ("variant", "policy", "mean_kept_bytes", "mean_kl", "perplexity"))
        rows += doc["results"]
        model, n_ctx = os.path.basename(doc["model"]), doc["n_ctx"]
    if not rows:
        raise ReportError(f"{', '.join(paths)}: no result")
    full_f16 = [r for r in rows if r["policy"] == "full" and storage(r["variant"]) == "K+V f16"]
    ref_bytes = full_f16[0]["mean_kept_bytes"] if full_f16 else max(r["mean_kept_bytes"] for r in rows)
    os.makedirs(out_dir, exist_ok=True)
    stores = sorted({storage(r["variant"]) for r in rows})
    methods = sorted({r["variant"].split()[0] for r in rows})
    colors = plt.get_cmap("tab10").colors
    markers = "os^Dv<>p*h"
    floor = 1e-5  # KL 0 (the reference itself) drawn at the floor of the log axis
    fig, ax = plt.subplots(figsize=(10, 6.5))
    for r in rows:
        ax.scatter(r["mean_kept_bytes"] / 1024, max(r["mean_kl"], floor), s=18,
                   color=colors[stores.index(storage(r["variant"])) % 10],
                   marker=markers[methods.index(r["variant"].split()[0]) % len(markers)])
    front = pareto(rows)
    ax.step([r["mean_kept_bytes"] / 1024 for r in front], [max(r["mean_kl"], floor) for r in front],
            where="post", color="black", linewidth=1, label="Pareto front")
    for i, s in enumerate(stores):
        ax.scatter([], [], color=colors[i % 10], marker="o", label=s)
    for i, m in enumerate(methods):
        ax.scatter([], [], color="grey", marker=markers[i % len(markers)], label=m)
    ax.axvline(ref_bytes / 1024 / 8, color="grey", linestyle=":", linewidth=1, label="12.5 % of full f16")
    ax.axhline(0.01, color="grey", linestyle="--", linewidth=1, label="KL 0.01")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("mean resident KV cache (KiB)")
    ax.set_ylabel("KL(full f16 || configuration), nats/token")
    ax.set_title(f"{model}, n_ctx {n_ctx}: eviction x K/V storage")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    save(fig, out_dir, "pareto_kl_vs_memory", dpi=130)

    def line(r):
        return (f"| {r['variant']} | {r.get('budget', '-') if r['policy'] != 'full' else '-'} | "
                f"{r['mean_kept_bytes'] / 1024:.1f} ({100 * r['mean_kept_bytes'] / ref_bytes:.1f} %) | "
                f"{r['mean_kl']:.4f} | {r['perplexity']:.3f} |")

    out = [f"Unevicted f16 cache: {ref_bytes / 1024:.1f} KiB mean resident.", ""]
    out.append("| memory at most | best of all | best f16 (eviction alone) | "
               "best without eviction (quantization alone) |")
    out.append("| --- | --- | --- | --- |")
    for share in (0.0625, 0.125, 0.25, 0.5, 0.75, 1.0):
        cap = share * ref_bytes
        fits = [r for r in rows if r["mean_kept_bytes"] <= cap]

        def best(sel):
            sel = [r for r in sel if r in fits]
            if not sel:
                return "none fits"
            r = min(sel, key=lambda r: r["mean_kl"])
            return (f"{r['variant']}{'' if r['policy'] == 'full' else ' b' + str(r['budget'])}: "
                    f"KL {r['mean_kl']:.4f}, {r['mean_kept_bytes'] / 1024:.1f} KiB")

        f16 = [r for r in rows if storage(r["variant"]) == "K+V f16"]
        noevict = [r for r in rows if r["policy"] == "full"]
        out.append(f"| {100 * share:g} % ({cap / 1024:.1f} KiB) | {best(rows)} | {best(f16)} | {best(noevict)} |")
    out += ["", "Pareto front (lowest KL at or below each memory):", ""]
    out.append("| configuration | budget | mean KiB (share of full f16) | KL | PPL |")
    out.append("| --- | ---: | ---: | ---: | ---: |")
    out += [line(r) for r in front]
    return out
