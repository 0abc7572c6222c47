"""docs/results.md: KL against memory on the books, and K/V storage against eviction."""
from .results_data import SHARES, SQUEEZE
from .results_text import kl, listing, para, pct, provenance, shares_text, span, table

BOOKS = (("Emma", 0), ("KJV", 1))


def kl_table(data, ctx):
    grid = data.book_kl(ctx)
    rows = []
    for m, cells in grid.items():
        if m == "full":
            continue
        shown = [f"{kl(cells[s][0])} / {kl(cells[s][1])}" if s in cells else "" for s in SHARES]
        rows.append([f"**{m}**" if m == SQUEEZE else m] + shown)
    budgets = {r["share_pct"]: r["budget"] for r in data.books[ctx]["rows"]}
    return table(["method"] + [f"{s} % ({budgets[s]} rows)" for s in SHARES], rows)


def lowest(grid, share, index):
    """The method(s) with the lowest KL at a share on one book."""
    values = {m: c[share][index] for m, c in grid.items() if m != "full" and share in c}
    best = min(values.values())
    return [m for m, v in values.items() if v == best]


def importances_text(data, ctxs):
    """How squeeze's two importances compare on the books."""
    hc = "squeeze (hidden cosine)"
    pairs = [(data.book_kl(c)[hc][s][i], data.book_kl(c)[SQUEEZE][s][i])
             for c in ctxs if hc in data.book_kl(c) for s in SHARES for i in (0, 1)]
    worse = sum(a > b for a, b in pairs)
    if worse == len(pairs):
        return "The paper's hidden-cosine importance has the higher KL in every cell."
    return f"The paper's hidden-cosine importance has the higher KL in {worse} of {len(pairs)} cells."


def gemma_text(doc):
    grid = {}
    for r in doc["rows"]:
        grid.setdefault(r["method"], {})[r["share_pct"]] = (r["kl_emma"],)
    shares = sorted({r["share_pct"] for r in doc["rows"]})
    winners = {s: lowest(grid, s, 0) for s in shares}
    best = sorted({m for w in winners.values() for m in w})
    where = listing(f"{m} at {shares_text([s for s in shares if m in winners[s]])}" for m in best)
    text = (f"Gemma 3 270M on *Emma*, n_ctx 4096, where only its 3 global layers evict "
            f"([{doc['file']}](data/{doc['file']})): lowest KL {where}.")
    if "h2o" in grid and SQUEEZE in grid:
        ratios = [grid[SQUEEZE][s][0] / grid["h2o"][s][0] for s in shares if s in grid[SQUEEZE]]
        text += f" Squeeze (key dispersion) has {span(ratios, lambda v: f'{v:.2f}')}x h2o's KL there."
    return text


def books_section(data):
    ctxs = sorted(data.books)
    out = ["## The books: KL against memory", "",
           para("The first n_ctx tokens of Jane Austen's *Emma* and of the King James Bible (KJV): the first half is ",
                "the prompt, the second half is decoded one token at a time against the evicting cache, and the KL ",
                "(nats a token) is taken from the full cache's next-token distribution. Every method holds the same ",
                "rows at a share, so the same K/V bytes."), "",
           "![KL against K/V memory on two books](figures/books_kl.svg)", ""]
    for ctx in ctxs:
        ppl = data.books[ctx]["full_perplexity"]
        out += [f"KL at n_ctx {ctx}, *Emma* / KJV (the full cache's perplexity {ppl['emma']:g} / {ppl['kjv']:g}):", ""]
        out += kl_table(data, ctx) + [""]
    rows, sq_best = [], {}
    for ctx in ctxs:
        grid = data.book_kl(ctx)
        for book, index in BOOKS:
            rows.append([f"{ctx}, {book}"] + [", ".join(lowest(grid, s, index)) for s in SHARES])
        sq_best[ctx] = [s for s in SHARES if all(SQUEEZE in lowest(grid, s, i) for _, i in BOOKS)]
    out += ["Lowest KL at each share:", ""] + table(["n_ctx, book"] + [pct(s) for s in SHARES], rows, ["l"] * 6)
    pyr = [data.book_kl(c)["pyramidkv"][s][i] / data.book_kl(c)[SQUEEZE][s][i]
           for c in ctxs for s in SHARES for i in (0, 1)]
    out += ["", para("Squeeze with its default importance (key dispersion) is lowest on both books at ",
                     listing(f"{shares_text(sq_best[c])} at n_ctx {c}" for c in ctxs),
                     f"; pyramidkv's fixed taper has {span(pyr, lambda v: f'{v:.1f}')}x squeeze's KL. ",
                     importances_text(data, ctxs))]
    for doc in data.gemma:
        out += ["", gemma_text(doc)]
    out += ["", provenance([data.books[c] for c in ctxs] + data.gemma), ""]
    return out


def share_cell(r):
    share = r["kv_share_pct"]
    share = f"{share[0]}-{share[1]}" if isinstance(share, list) else f"{share}"
    return f"{kl(r['kl_emma'])} / {kl(r['kl_kjv'])} ({share} %)"


def storage_section(data):
    st = data.storage
    by, stores = {}, []
    for r in st["rows"]:
        by.setdefault((r["method"], r["storage"]), {})[r["share_pct"]] = r
        if r["storage"] not in stores:
            stores.append(r["storage"])
    rows = [[store, share_cell(by[("full", store)][None])]
            + [share_cell(by[("squeeze", store)][s]) if s in by[("squeeze", store)] else "" for s in SHARES]
            for store in stores]
    deltas = [by[(m, "q8_0")][s][k] - by[(m, "f16")][s][k] for m in ("h2o", "squeeze", "snapkv")
              for s in SHARES if s in by.get((m, "q8_0"), {}) for k in ("kl_emma", "kl_kjv")]
    ns = {}
    for r in data.needle_storage["rows"]:
        ns.setdefault((r["method"], r["storage"]), {})[r["share_pct"]] = r
    nrows = []
    for store in stores:
        full, h40 = ns[("full", store)][None], ns[("h2o", store)][40]
        nrows.append([store, f"{pct(full['accuracy_pct'])} ({full['kv_share_pct']} %)",
                      f"{pct(h40['accuracy_pct'])} ({h40['kv_share_pct']} %)"])
    q4, f10 = by[("full", "q4_0")][None], by[("squeeze", "f16")][10]
    evicting = sorted({r["accuracy_pct"] for r in data.needle_storage["rows"] if r["method"] != "full"})
    out = ["## K/V storage: fewer bits a row against fewer rows", "",
           "![KL against K/V bytes by storage](figures/storage_kl.svg)", "",
           para("Squeeze over each K/V storage on the books (SmolLM2, n_ctx 4096): KL *Emma* / KJV from the f16 full ",
                "cache and, in brackets, the resident K/V as a share of the f16 full cache's bytes (the f16 cache ",
                "itself shows 106 %, the headroom it keeps above its rows):"), ""]
    out += table(["storage", "all rows (full cache)"] + [f"squeeze {s} %" for s in SHARES], rows)
    out += ["", para(f"q8_0 under h2o, squeeze and snapkv moves the KL by {min(deltas):+.4f} to {max(deltas):+.4f} ",
                     f"nats at about half the bytes. The full cache in q4_0 has KL {kl(q4['kl_emma'])} / ",
                     f"{kl(q4['kl_kjv'])}, more than f16 squeeze at 10 % of the rows ({kl(f10['kl_emma'])} / ",
                     f"{kl(f10['kl_kjv'])}), yet on the query-agnostic needle (4,096 tokens) it keeps what no ",
                     "eviction does:"), ""]
    out += table(["storage", "needle: full cache (bytes)", "needle: h2o at 40 % (bytes)"], nrows, ["l", "r", "r"])
    out += ["", para("(Bytes as a share of the f16 full cache's. Every evicting configuration of that grid, h2o, ",
                     f"squeeze and snapkv at 10-40 % over each storage, finds {listing(pct(a) for a in evicting)}.)"),
            "", provenance([st, data.needle_storage]), ""]
    return out
