#!/usr/bin/python3
"""Eviction, quantization, both, at equal memory: reads `squeezekv sweep --json` files, plots KL
against mean resident KV bytes for every configuration (colour: K/V storage, marker: method) with
the Pareto front (the lowest KL at or below each memory), writes PNG and SVG, and prints a
Markdown table of the best configuration at fractions of the unevicted f16 cache's memory.

usage: scripts/plot_pareto.py OUT_DIR SWEEP.json [SWEEP.json ...]
"""
import argparse
import json
import os
import re

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("sweep_json", nargs="+")
    args = parser.parse_args()
    rows, model, n_ctx = [], "", 0
    for path in args.sweep_json:
        with open(path) as f:
            doc = json.load(f)
        rows += doc["results"]
        model, n_ctx = os.path.basename(doc["model"]), doc["n_ctx"]
    full_f16 = [r for r in rows if r["policy"] == "full" and storage(r["variant"]) == "K+V f16"]
    ref_bytes = full_f16[0]["mean_kept_bytes"] if full_f16 else max(r["mean_kept_bytes"] for r in rows)
    os.makedirs(args.out_dir, exist_ok=True)
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
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(args.out_dir, f"pareto_kl_vs_memory.{ext}"), dpi=130)
    plt.close(fig)

    def line(r):
        return (f"| {r['variant']} | {r.get('budget', '-') if r['policy'] != 'full' else '-'} | "
                f"{r['mean_kept_bytes'] / 1024:.1f} ({100 * r['mean_kept_bytes'] / ref_bytes:.1f} %) | "
                f"{r['mean_kl']:.4f} | {r['perplexity']:.3f} |")

    print(f"Unevicted f16 cache: {ref_bytes / 1024:.1f} KiB mean resident.\n")
    print("| memory at most | best of all | best f16 (eviction alone) | best without eviction (quantization alone) |")
    print("| --- | --- | --- | --- |")
    for share in (0.0625, 0.125, 0.25, 0.5, 0.75, 1.0):
        cap = share * ref_bytes
        fits = [r for r in rows if r["mean_kept_bytes"] <= cap]

        def best(sel):
            sel = [r for r in sel if r in fits]
            if not sel:
                return "none fits"
            r = min(sel, key=lambda r: r["mean_kl"])
            return f"{r['variant']}{'' if r['policy'] == 'full' else ' b' + str(r['budget'])}: KL {r['mean_kl']:.4f}, {r['mean_kept_bytes'] / 1024:.1f} KiB"

        f16 = [r for r in rows if storage(r["variant"]) == "K+V f16"]
        noevict = [r for r in rows if r["policy"] == "full"]
        print(f"| {100 * share:g} % ({cap / 1024:.1f} KiB) | {best(rows)} | {best(f16)} | {best(noevict)} |")
    print("\nPareto front (lowest KL at or below each memory):\n")
    print("| configuration | budget | mean KiB (share of full f16) | KL | PPL |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in front:
        print(line(r))


if __name__ == "__main__":
    main()
