"""Tables (Markdown) and plots (OUT_DIR/plots) of scripts/long_context.sh's results.

Reads whatever of the pieces' files OUT_DIR holds (a piece not yet run is left out and named):
needle_qag.jsonl / needle_qaw.jsonl / needle_storage.jsonl / combos_qaw.jsonl / combos_qag.jsonl /
combos_qaw_kernel.jsonl / combos_gemma3_qaw.jsonl / combos_gemma3_qag.jsonl (squeezekv needle --json),
books_CTX_BOOK.json and books_storage_CTX_BOOK.json (squeezekv sweep --json) and
stream_emma_METHOD.json (perplexity --stream --json). Every needle figure is the exact-match
accuracy over all samples of the cells averaged, beside the mean resident K/V bytes as a share of
the full cache's at the same lengths, so that methods are compared at equal memory.
"""
import glob
import os
import re
from collections import defaultdict

from . import needle
from .load import NEEDLE_KEYS, load_needle, read_finished, stream_results, sweep_doc

NEEDLE_FILES = [
    ("needle_qag", "Needle retrieval, query-agnostic (the question after the evicting prefill)"),
    ("needle_qaw", "Needle retrieval, query-aware (the question in the prefilled prompt)"),
    ("needle_storage", "K/V storage alone and with eviction, 4096 tokens, query-agnostic"),
    ("combos_qaw", "Layer x head x scorer combinations, 4096 tokens, query-aware"),
    ("combos_qag", "Layer x head x scorer combinations, 4096 tokens, query-agnostic"),
    ("combos_qaw_kernel", "snapkv's 31-position pooling at 10 % of the rows, 4096 and 8192 tokens, query-aware"),
    ("combos_gemma3_qaw", "Gemma 3 270M: the combinations, 4096 tokens, query-aware"),
    ("combos_gemma3_qag", "Gemma 3 270M: the combinations, 4096 tokens, query-agnostic"),
]
pct = needle.pct
CELL_KEYS = NEEDLE_KEYS + ("model", "question_in_prompt", "full_kv_bytes")


def finished_sweeps(out_dir, prefix, out, keys):
    """(ctx, book, file name, doc) of every OUT_DIR/PREFIX_CTX_BOOK.json; a file still being
    written is named in out and left out."""
    for path in sorted(glob.glob(os.path.join(out_dir, f"{prefix}_*.json"))):
        name = os.path.basename(path)
        match = re.fullmatch(rf"{prefix}_(\d+)_(.+)\.json", name)
        if not match:
            continue
        doc = read_finished(path)
        if doc is None:
            out += [f"({name}: not complete, left out)", ""]
            continue
        yield int(match.group(1)), match.group(2), name, sweep_doc(path, doc, keys)


def books_tables(out_dir):
    out = []
    keys = ("method", "variant", "budget", "mean_kl", "perplexity")
    for ctx, book, _, doc in finished_sweeps(out_dir, "books", out, keys):
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
    keys = ("method", "kv_type", "budget", "mean_kl", "mean_kept_bytes", "mean_full_bytes")
    for ctx, book, name, doc in finished_sweeps(out_dir, "books_storage", out, keys):
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
        doc = read_finished(path)
        if doc is None:
            out.append(f"| {os.path.basename(path)} | not complete, left out | | | | | |")
            continue
        for r in stream_results(path, doc):
            out.append(
                f"| {os.path.basename(path)} | {r['variant']} | {r['budget']} | {r['tokens']} | "
                f"{r['perplexity']:.3f} | {r['peak_kept_bytes'] / 1024:.0f} | {r['seconds']:.0f} |"
            )
    out.append("")
    return out


def report(out_dir, plots=True):
    """The whole Markdown (a list of lines); the needle plots into OUT_DIR/plots."""
    lines = ["# Long-context results", ""]
    missing, files = [], []
    for name, title in NEEDLE_FILES:
        path = os.path.join(out_dir, f"{name}.jsonl")
        cells = load_needle(path, CELL_KEYS, allow_empty=True) if os.path.exists(path) else []
        if not cells:
            missing.append(name)
            continue
        files.append((name, title, cells))
    references = needle.f16_references(cells for _, _, cells in files)
    for name, title, cells in files:
        lines += needle.tables(cells, title, references)
        if plots:
            plot_dir = os.path.join(out_dir, "plots")
            os.makedirs(plot_dir, exist_ok=True)
            needle.share_plots(cells, plot_dir, name, title)
    books = books_tables(out_dir) + storage_book_tables(out_dir)
    stream = stream_tables(out_dir)
    if not books:
        missing.append("books")
    if not stream:
        missing.append("stream")
    lines += books + stream
    if missing:
        lines += [f"Not run yet: {', '.join(missing)}.", ""]
    return lines
