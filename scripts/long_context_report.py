#!/usr/bin/python3
"""Tables (Markdown, on stdout) and plots (OUT_DIR/plots) of scripts/long_context.sh's results.

usage: scripts/long_context_report.py OUT_DIR

Reads whatever of the pieces' files OUT_DIR holds (a piece not yet run is left out and named):
needle_qag.jsonl / needle_qaw.jsonl / needle_storage.jsonl / combos_qaw.jsonl / combos_qag.jsonl /
combos_qaw_kernel.jsonl / combos_gemma3_qaw.jsonl / combos_gemma3_qag.jsonl (squeezekv needle --json),
books_CTX_BOOK.json and books_storage_CTX_BOOK.json (squeezekv sweep --json) and
stream_emma_METHOD.json (perplexity --stream --json). Every needle figure is the exact-match
accuracy over all samples of the cells averaged, beside the mean resident K/V bytes as a share of
the full cache's at the same lengths, so that methods are compared at equal memory.
"""
import glob
import json
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_needle  # noqa: E402  (the heatmaps and the memory plot)


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


def needle_tables(cells, title, references):
    """Accuracy by variant (rows) and budget share (columns), over every length and depth, then
    one table per length; each cell `accuracy (K/V bytes as a share of the full f16 cache's)`, the
    share left out where no f16 cell of that model and length was measured."""
    shares = sorted({plot_needle.budget_key(c) for c in cells if c["budget"] != 0})
    lengths = sorted({c["length"] for c in cells})
    out = [f"### {title}", ""]
    # A method's id names it where the file holds one variant of it; else its variant string.
    # snapkv's window, capped at half of a small budget, is not a variant of its own here.
    def base(variant):
        return re.sub(r" window=\d+", "", variant)

    variants_of = defaultdict(set)
    for c in cells:
        variants_of[c["method"]].add(base(c["variant"]))
    label = {
        c["variant"]: c["method"] if len(variants_of[c["method"]]) == 1 else base(c["variant"]) for c in cells
    }
    scopes = [("all lengths", lengths)] + [(f"{n} tokens", [n]) for n in lengths] if len(lengths) > 1 else [
        (f"{lengths[0]} tokens", lengths)
    ]
    for scope, scope_lengths in scopes:
        groups = defaultdict(list)
        for c in cells:
            if c["length"] in scope_lengths:
                key = plot_needle.budget_key(c)
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


def load_finished(path):
    """A result file's JSON, or None while its run is still going (empty or cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError:
        return None


def finished_sweeps(out_dir, prefix, out):
    """(ctx, book, file name, doc) of every OUT_DIR/PREFIX_CTX_BOOK.json; a file still being
    written is named in out and left out."""
    for path in sorted(glob.glob(os.path.join(out_dir, f"{prefix}_*.json"))):
        name = os.path.basename(path)
        match = re.fullmatch(rf"{prefix}_(\d+)_(.+)\.json", name)
        if not match:
            continue
        doc = load_finished(path)
        if doc is None:
            out += [f"({name}: not complete, left out)", ""]
            continue
        yield int(match.group(1)), match.group(2), name, doc


def books_tables(out_dir):
    out = []
    for ctx, book, _, doc in finished_sweeps(out_dir, "books", out):
        rows = doc["results"]
        budgets = sorted({r["budget"] for r in rows if r["budget"] != 0})
        out += [f"### {book}, n_ctx {ctx} ({doc['text_tokens']} tokens in the book)", ""]
        out.append("KL from the full cache (perplexity), per budget as a share of n_ctx")
        out.append("")
        out.append("| variant | " + " | ".join(f"{b} ({pct(b / ctx)})" for b in budgets) + " |")
        out.append("| --- |" + " ---: |" * len(budgets))
        full = [r for r in rows if r["budget"] == 0 and r["method"] == "full"]
        if full:
            out.append(f"| full | perplexity {full[0]['perplexity']:.3f} |" + " |" * (len(budgets) - 1))
        by_variant = defaultdict(dict)
        for r in rows:
            if r["budget"] != 0:
                by_variant[r["variant"]][r["budget"]] = r
        for variant in sorted(by_variant):
            cells = []
            for b in budgets:
                r = by_variant[variant].get(b)
                cells.append(f"{r['mean_kl']:.4f} ({r['perplexity']:.2f})" if r else "")
            out.append(f"| {variant} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def storage_book_tables(out_dir):
    """books_storage_CTX_BOOK.json: one row per (method, storage), each cell the KL from the f16
    full cache and, in brackets, the mean resident K/V as a share of the f16 full cache's."""
    out = []
    for ctx, book, name, doc in finished_sweeps(out_dir, "books_storage", out):
        rows = doc["results"]
        f16_bytes = [r["mean_full_bytes"] for r in rows if r["method"] == "full" and r["kv_type"] == "f16"]
        if not f16_bytes:
            out += [f"({name}: no f16 full-cache row, left out)", ""]
            continue
        budgets = sorted({r["budget"] for r in rows if r["budget"] != 0})
        out += [f"### Storage x eviction: {book}, n_ctx {ctx}", ""]
        out.append("KL from the f16 full cache (mean resident K/V as a share of its bytes)")
        out.append("")
        out.append("| method | storage | all rows | " + " | ".join(pct(b / ctx) for b in budgets) + " |")
        out.append("| --- | --- |" + " ---: |" * (len(budgets) + 1))
        by_row = defaultdict(dict)
        for r in rows:
            by_row[(r["method"], r["kv_type"])][r["budget"]] = r
        for (method, kv_type), cells in sorted(by_row.items()):
            shown = []
            for b in [0] + budgets:
                r = cells.get(b)
                shown.append(f"{r['mean_kl']:.4f} ({pct(r['mean_kept_bytes'] / f16_bytes[0])})" if r else "")
            out.append(f"| {method} | {kv_type} | " + " | ".join(shown) + " |")
        out.append("")
    return out


def stream_tables(out_dir):
    paths = sorted(glob.glob(os.path.join(out_dir, "stream_*.json")))
    if not paths:
        return []
    out = ["### A whole book streamed through an evicting cache", ""]
    out.append("| file | variant | budget | tokens | perplexity | peak resident K/V (KiB) | seconds |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for path in paths:
        doc = load_finished(path)
        if doc is None:
            out.append(f"| {os.path.basename(path)} | not complete, left out | | | | | |")
            continue
        for r in doc.get("results", [doc]):
            out.append(
                f"| {os.path.basename(path)} | {r['variant']} | {r['budget']} | {r['tokens']} | "
                f"{r['perplexity']:.3f} | {r['peak_kept_bytes'] / 1024:.0f} | {r['seconds']:.0f} |"
            )
    out.append("")
    return out


def plots(cells, plot_dir, prefix, title):
    """The memory plot of every variant, and one heatmap figure per budget share (with the full
    cache beside it) so that each figure stays readable."""
    os.makedirs(plot_dir, exist_ok=True)
    plot_needle.memory(cells, plot_dir, title, prefix)
    full = [c for c in cells if c["budget"] == 0]
    for share in sorted({plot_needle.budget_key(c) for c in cells if c["budget"] != 0}):
        subset = full + [c for c in cells if c["budget"] != 0 and plot_needle.budget_key(c) == share]
        name = f"{prefix}_{round(100 * share)}pct" if isinstance(share, float) else f"{prefix}_{share}"
        plot_needle.heatmaps(subset, plot_dir, f"{title}, {plot_needle.budget_label(share)}", name)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out_dir = sys.argv[1]
    lines = ["# Long-context results", ""]
    missing = []
    files = []
    for name, title in [
        ("needle_qag", "Needle retrieval, query-agnostic (the question after the evicting prefill)"),
        ("needle_qaw", "Needle retrieval, query-aware (the question in the prefilled prompt)"),
        ("needle_storage", "K/V storage alone and with eviction, 4096 tokens, query-agnostic"),
        ("combos_qaw", "Layer x head x scorer combinations, 4096 tokens, query-aware"),
        ("combos_qag", "Layer x head x scorer combinations, 4096 tokens, query-agnostic"),
        ("combos_qaw_kernel", "snapkv's 31-position pooling at 10 % of the rows, 4096 and 8192 tokens, query-aware"),
        ("combos_gemma3_qaw", "Gemma 3 270M: the combinations, 4096 tokens, query-aware"),
        ("combos_gemma3_qag", "Gemma 3 270M: the combinations, 4096 tokens, query-agnostic"),
    ]:
        path = os.path.join(out_dir, f"{name}.jsonl")
        cells = plot_needle.read_cells(path) if os.path.exists(path) else []
        if not cells:
            missing.append(name)
            continue
        files.append((name, title, cells))
    references = f16_references(cells for _, _, cells in files)
    for name, title, cells in files:
        lines += needle_tables(cells, title, references)
        plots(cells, os.path.join(out_dir, "plots"), name, title)
    books = books_tables(out_dir) + storage_book_tables(out_dir)
    stream = stream_tables(out_dir)
    if not books:
        missing.append("books")
    if not stream:
        missing.append("stream")
    lines += books + stream
    if missing:
        lines += [f"Not run yet: {', '.join(missing)}.", ""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
