"""`squeezekv sweep --stream --json` files: perplexity per budget and position rule against the
sliding window's, per segment against the position in the stream (StreamingLLM's figure), and
split by what each segment's text is (plain ASCII or not)."""
import glob
import math
import os
import sys
from collections import defaultdict

from .load import ReportError, load_stream
from .plotting import plt, save

RULES = ["span", "cache", "text"]  # the columns, in this order, for the rules present


def method_label(r):
    plain = r["score"] == "attention" or r["policy"] in ("window", "streaming")
    return r["method"] + ("" if plain else " " + r["score"])


LABEL_KEYS = ("method", "score", "policy", "budget", "positions", "perplexity", "segments", "mean_kept_bytes")


def stream_tables(paths):
    """Markdown: per budget, every method's stream perplexity under each position rule present
    (span, cache, text), its ratio to the sliding window's (same budget, same rule), and the drift
    of that ratio from the first segment to the last."""
    rows = []
    tokens = warmup = segment = None
    for path in paths:
        doc = load_stream(path, LABEL_KEYS)
        tokens, warmup, segment = doc["text_tokens"], doc["warmup"], doc["segment"]
        rows += doc["results"]
    by = defaultdict(dict)  # (budget, positions) -> method -> row
    for r in rows:
        by[(r["budget"], r["positions"])][method_label(r)] = r
    out = [f"Stream of {tokens} tokens, warm-up {warmup}, segments of {segment} scored tokens.", ""]
    budgets = sorted({b for b, _ in by})
    rules = [r for r in RULES if any(key[1] == r for key in by)]
    for budget in budgets:
        per_rule = {rule: by.get((budget, rule), {}) for rule in rules}
        out += [f"### Budget {budget}", ""]
        head, line = ["method"], ["---"]
        for rule in rules:
            head += [f"PPL, {rule} positions"]
            line += ["---:"]
            if rule != "text":
                head += ["/ window", "drift of / window, first to last segment"]
                line += ["---:", "---:"]
        out.append("| " + " | ".join(head + ["KV KiB"]) + " |")
        out.append("| " + " | ".join(line + ["---:"]) + " |")
        methods = set().union(*per_rule.values())
        first = per_rule[rules[0]]

        def key(m):
            row = first.get(m) or next(p[m] for p in per_rule.values() if m in p)
            return row["perplexity"]

        for m in sorted(methods, key=key):
            cells = [m]
            any_row = None
            for rule in rules:
                r, window = per_rule[rule].get(m), per_rule[rule].get("window")
                any_row = any_row or r
                cells.append("{:.4f}".format(r["perplexity"]) if r else "")
                if rule == "text":
                    continue
                if r and window:
                    a = r["segments"][0]["perplexity"] / window["segments"][0]["perplexity"]
                    b = r["segments"][-1]["perplexity"] / window["segments"][-1]["perplexity"]
                    cells += ["{:.3f}".format(r["perplexity"] / window["perplexity"]),
                              "{:+.1f} %".format(100 * (b / a - 1))]
                else:
                    cells += ["", ""]
            cells.append("{:.1f}".format(any_row["mean_kept_bytes"] / 1024))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def stream_plots(stream_dir, out_dir):
    """OUT_DIR/stream_bBUDGET_RULE.{png,svg}: perplexity per segment against the position in the
    stream, one line per method, one figure per (budget, position rule); the window at the largest
    budget, run alone, is drawn on every figure as the reference."""
    groups = defaultdict(list)  # (budget, positions) -> rows
    reference = []
    paths = sorted(glob.glob(os.path.join(stream_dir, "*.json")))
    if not paths:
        raise ReportError(f"{stream_dir}: no stream file (*.json)")
    for path in paths:
        for r in load_stream(path, ("method", "budget", "positions", "segments"))["results"]:
            groups[(r["budget"], r["positions"])].append(r)
    os.makedirs(out_dir, exist_ok=True)
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
        save(fig, out_dir, f"stream_b{budget}_{positions}", dpi=120)


def segment_kinds(doc):
    """first scored position of each segment -> True when its text is plain ASCII. Needs the
    Python module (build/python) to tokenize the text the JSON names."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "build", "python"))
    import squeezekv  # noqa: E402  (the built module; only this report needs it)

    model = squeezekv.Model.load(doc["model"])
    tokens = list(model.tokenize_file(doc["text"]))
    kinds = {}
    for seg in doc["results"][0]["segments"]:
        first = seg["first"]
        # A segment scores the predictions of tokens first .. first + scored - 1.
        text = model.detokenize(tokens[first:first + seg["scored"]])
        kinds[first] = text.isascii()
    return kinds


def pooled(segments, keep):
    """Perplexity over the kept segments (mean NLL weighted by scored tokens), and the segments."""
    chosen = [s for s in segments if keep(s["first"])]
    n = sum(s["scored"] for s in chosen)
    return (math.exp(sum(s["mean_nll"] * s["scored"] for s in chosen) / n) if n else None), chosen


def by_text(paths, kinds_of=segment_kinds):
    """Markdown: for every method and budget (span rule), perplexity over the segments whose text
    is plain ASCII and over the others (in tinystories_val.txt, quotes stored as UTF-8 read as
    Windows-1252, which a small vocabulary spells byte by byte), each against the sliding window's
    over the same segments, and the drift of that ratio from the kind's first segment to its last."""
    rows, kinds, text = [], None, None
    for path in paths:
        doc = load_stream(path, LABEL_KEYS[:-1])
        if "model" not in doc or "text" not in doc:
            raise ReportError(f'{path}: a stream file without its "model" and "text"')
        if kinds is None:
            kinds, text = kinds_of(doc), doc["text"]
        elif doc["text"] != text:  # the segments' kinds come from one text
            raise ReportError(f"{path} is a stream of {doc['text']}, not of {text}")
        rows += [r for r in doc["results"] if r["positions"] == "span"]
    by = defaultdict(dict)  # budget -> method -> row
    for r in rows:
        by[r["budget"]][method_label(r)] = r
    ascii_n = sum(kinds.values())
    out = [f"{ascii_n} of {len(kinds)} segments are plain ASCII; the others hold other characters.", ""]
    out.append("| budget | method | PPL, ASCII segments | / window | drift | PPL, other segments | / window | drift |")
    out.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for budget in sorted(by):
        window = by[budget].get("window")
        if window is None:
            continue
        for method, r in sorted(by[budget].items(), key=lambda kv: kv[1]["perplexity"]):
            cells = [str(budget), method]
            for plain in (True, False):
                keep = lambda first, plain=plain: kinds[first] == plain  # noqa: E731
                ppl, segs = pooled(r["segments"], keep)
                wppl, wsegs = pooled(window["segments"], keep)
                if ppl is None or wppl is None:  # no segment of this kind
                    cells += ["", "", ""]
                    continue
                first = segs[0]["perplexity"] / wsegs[0]["perplexity"]
                last = segs[-1]["perplexity"] / wsegs[-1]["perplexity"]
                cells += ["{:.4f}".format(ppl), "{:.3f}".format(ppl / wppl),
                          "{:+.1f} %".format(100 * (last / first - 1))]
            out.append("| " + " | ".join(cells) + " |")
    return out
