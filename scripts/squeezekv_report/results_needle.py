"""docs/results.md: the needle (query-aware, query-agnostic) and read once, ask later (kvzip)."""
from .results_data import SHARES, SQUEEZE
from .results_text import found, listing, para, pct, provenance, table

TABLE_LENGTHS = (4096, 8192)
K31 = "snapkv --kernel 31"


def grid_table(data, mode):
    """Methods (rows) by length and share (columns): needles found, %."""
    lengths = [n for n in TABLE_LENGTHS if (mode, n) in data.grid]
    methods = []
    for n in lengths:
        methods += [m for m in data.grid[(mode, n)] if m != "full" and m not in methods]
    head = ["method"] + [f"{n // 1024}k, {s} %" if i == 0 else f"{s} %" for n in lengths for i, s in enumerate(SHARES)]
    rows = []
    for m in methods:
        cells = [data.grid[(mode, n)].get(m, {}).get(s) for n in lengths for s in SHARES]
        rows.append([f"**{m}**" if m == SQUEEZE else m] + ["" if c is None else pct(c) for c in cells])
    return table(head, rows)


def full_text(data, mode):
    parts = [f"{pct(data.grid[(mode, n)]['full'][None])} at {n:,} tokens"
             for n in TABLE_LENGTHS if (mode, n) in data.grid]
    misses = [f"depth {k[4]:g} at {k[1]:,} tokens" for k, (f, _) in sorted(data.depths.items())
              if k[0] == mode and k[2] == "full" and f == 0 and k[1] in TABLE_LENGTHS]
    return ("The full cache finds " + " and ".join(parts)
            + (f"; it misses {listing(misses)}, SmolLM2's own limit" if misses else ""))


def versus(data, mode, a, b):
    """(above, equal, below): cells of the grids where method a finds more, as many, fewer than b."""
    counts = [0, 0, 0]
    for (m, _), grid in data.grid.items():
        if m != mode or a not in grid or b not in grid:
            continue
        for s in SHARES:
            if s in grid[a] and s in grid[b]:
                x, y = grid[a][s], grid[b][s]
                counts[0 if x > y else 1 if x == y else 2] += 1
    return counts


def versus_text(data, mode):
    above, equal, below = versus(data, mode, SQUEEZE, "h2o")
    lengths = ", ".join(f"{n:,}" for n in sorted(n for m, n in data.grid if m == mode))
    return (f"Over the {above + equal + below} cells of the {mode} grids ({lengths} tokens), squeeze finds more "
            f"needles than h2o in {above}, as many in {equal} and fewer in {below}.")


def needle_section(data):
    qaw, qag = ("query-aware", "query-agnostic")
    k31 = [data.grid[(qaw, n)].get(K31, {}).get(10) for n in TABLE_LENGTHS]
    best10 = max(v.get(10, 0) for (m, _), g in data.grid.items() if m == qag for k, v in g.items() if k != "full")
    out = ["## The needle: which method at which memory", "",
           para("RULER's single needle (a 7-digit value) in TinyStories text, five depths, 2 samples a depth (10 ",
                "needles a cell), greedy, exact match. Every evicting method holds the same rows at a share, so each ",
                "column is at equal K/V bytes. *Query-aware*: the question is in the prompt the cache compresses. ",
                "*Query-agnostic*: the document is compressed first and the question comes after it (\"read once, ",
                "ask later\")."), "",
           "![Needles found against K/V memory, query-aware](figures/needle_query_aware.svg)", "",
           f"**Query-aware**, needles found at a share of the rows. {full_text(data, qaw)}.", ""]
    out += grid_table(data, qaw)
    out += ["", para(f"snapkv pooled over 31 positions (`--kernel 31`) at 10 % finds {pct(k31[0])} at 4,096 tokens ",
                     f"and {pct(k31[1])} at 8,192, what the full cache finds; at the published kernel 5 snapkv loses ",
                     "the needle's last digits. The cumulative scorers (h2o, squeeze, pyramidkv) evict between ",
                     "prefill chunks, before the question comes, and keep the newest needle. ",
                     versus_text(data, qaw)), "",
            "![Needles found against K/V memory, query-agnostic](figures/needle_query_agnostic.svg)", "",
            f"**Query-agnostic**. {full_text(data, qag)}.", ""]
    out += grid_table(data, qag)
    out += ["", para(f"No method of these grids finds more than {pct(best10)} at 10 % of the rows (the newest ",
                     "needle), and at 40 % only a recent window reaches the depth-0.75 needle. ",
                     versus_text(data, qag),
                     " Squeeze does not help here; kvzip (next section) and storing every row in fewer bits (the ",
                     "squares at 4,096 tokens, section \"K/V storage\") do."), "",
            "![Needles found by depth and length](figures/needle_heatmap.svg)", "",
            provenance(sorted(data.grid_docs, key=lambda d: d["file"]) + [data.needle_storage]), ""]
    return out


READ_ONCE_METHODS = ["full", "kvzip", "kvzip_plus", "kvzip_stream", "keydiff", "expected_attention", "snapkv", "h2o",
                     SQUEEZE, "kvzip_uniform", "squeeze_kvzip"]


def read_once_table(data):
    keys = list(data.read_once) + list(data.chunk2048)
    cols = sorted({(k[0], k[2], k[3]) for k in keys if k[2] is not None}, key=lambda c: (c[2], c[0], c[1]))
    head = ["method"] + [f"{n:,} tokens, {s} %" if q == 1 else f"{n:,}, {q} questions, {s} %" for n, s, q in cols]
    rows, marked = [], False
    for m in READ_ONCE_METHODS:
        cells = []
        for n, s, q in cols:
            key = (n, m, None if m == "full" else s, q)
            if key in data.read_once:
                cells.append(found(*data.read_once[key][:2]))
            elif key in data.chunk2048:
                cells.append(found(*data.chunk2048[key][:2]) + "<sup>a</sup>")
                marked = True
            else:
                cells.append("")
        if any(cells):
            rows.append([("**kvzip**" if m == "kvzip" else "full cache (all rows)" if m == "full" else m)] + cells)
    out = table(head, rows)
    if marked:
        out += ["", "<sup>a</sup> kvzip's scores over chunks of 2,048 tokens (the reference's); the default is 512."]
    return out


def read_once_section(data):
    cost = {r["kvzip_chunk"]: r for r in data.cost["rows"]}
    demo = data.demo
    out = ["## Read once, ask later: kvzip", "",
           para("The document is prefilled and compressed before the question comes, the way a saved cache is used ",
                "(`generate --save-cache`, then questions against the file). kvzip scores every row by a pass in ",
                "which the model repeats the document (docs/semantics.md, section 7a) and ranks the rows across ",
                "layers and heads; the other methods are those of the query-agnostic grid. Needles found ",
                "(SmolLM2-135M-Instruct Q4_1, the single needle, query-agnostic; the full cache's own figure in its ",
                "row):"), ""]
    out += read_once_table(data)
    out += ["", f"The demo's pass key ({demo['document']}; `scripts/demo.sh`):", ""]
    rows = [[r["cache"], f"`{r['answer']}`", "yes" if r["right"] else "no", pct(r["rows_kept_pct"]), f"{r['kv_mib']:g}",
             f"{r['prompt_tps']:g}", f"{r['decode_tps']:g}"] for r in demo["rows"]]
    out += table(["cache", "answer", "right", "rows kept", "K/V MiB", "prompt tok/s", "decode tok/s"], rows,
                 ["l", "l", "l", "r", "r", "r", "r"])
    wrong = [r["cache"] for r in demo["rows"] if not r["right"]]
    out += ["", para(f"Wrong answers: {'; '.join(wrong) or 'none'}. kvzip's prompt speed includes its scoring pass, ",
                     f"which costs {cost[512]['pass_over_prefill']:g} times a plain prefill with chunks of 512 ",
                     f"({cost[2048]['pass_over_prefill']:g} with 2,048)."), "",
            provenance(data.read_once_docs + [demo, data.cost]), ""]
    return out
