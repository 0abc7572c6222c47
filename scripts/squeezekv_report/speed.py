"""Speed against llama.cpp from the docs/data speed files: the ratio of squeezekv's tokens/s to
llama.cpp's per CPU, model, test, depth and cache (the full cache, or squeeze at 10 % of the
depth's rows), each from the newest measurement of that cell. A row of several rounds (the tools
alternated) gives the median of the rounds' ratios."""
from collections import namedtuple

CACHES = ("full", "squeeze")
MODELS = ("SmolLM2-135M Q4_1", "Gemma 3 270M Q4_K_M", "Qwen2.5-Coder-1.5B Q4_K_M")
TESTS = ("pp512", "tg128")
Cell = namedtuple("Cell", "ratio llama_cpp squeezekv rounds doc row")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def ratio(llama_cpp, squeezekv):
    """squeezekv's tokens/s over llama.cpp's."""
    return squeezekv / llama_cpp


def cell_of(row, cache):
    """(ratio, llama.cpp t/s, squeezekv t/s, rounds) of one cache in a row, or None. With rounds:
    the median of the rounds' ratios, beside the median tokens/s of each tool."""
    if "rounds" in row:
        pairs = [(r["llama_cpp"], r[cache]) for r in row["rounds"] if cache in r]
        if not pairs:
            return None
        return (median([ratio(a, b) for a, b in pairs]), median([a for a, _ in pairs]),
                median([b for _, b in pairs]), len(pairs))
    if cache not in row:
        return None
    return ratio(row["llama_cpp"], row[cache]), row["llama_cpp"], row[cache], 1


def newest_cells(docs):
    """{(cpu_label, model, test, depth, cache): Cell}, each from the newest file holding it (by
    date, then the sitting's sequence, then file name) and within a file its last row; rows marked
    exclude_from_summary are passed over."""
    cells = {}
    for doc in sorted(docs, key=lambda d: (d["date"], d.get("sequence", 0), d["file"])):
        for row in doc["rows"]:
            if row.get("exclude_from_summary"):
                continue
            for cache in CACHES:
                value = cell_of(row, cache)
                if value:
                    key = (doc["cpu_label"], row["model"], row["test"], row["depth"], cache)
                    cells[key] = Cell(*value, doc, row)
    return cells


def cpu_labels(docs):
    """The CPUs in the order of their first file's date."""
    seen = []
    for doc in sorted(docs, key=lambda d: (d["date"], d.get("sequence", 0), d["file"])):
        if doc["cpu_label"] not in seen:
            seen.append(doc["cpu_label"])
    return seen


def columns(cells, cpu, depths=None):
    """(depth, cache) columns measured on a CPU, by depth, the full cache first."""
    have = {(k[3], k[4]) for k in cells if k[0] == cpu}
    cols = sorted(have, key=lambda dc: (dc[0], CACHES.index(dc[1])))
    return [c for c in cols if depths is None or c[0] in depths]


def depth_label(depth):
    return "32k" if depth >= 32000 else str(depth)


def column_label(depth, cache):
    return (depth_label(depth) if depth else "depth 0") + (", squeeze" if cache == "squeeze" else "")


def fmt_ratio(r):
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x"


def fmt_tps(v):
    return f"{v:.4g}"


class Notes:
    """Footnotes: one number per distinct text, in the order first asked for."""

    def __init__(self):
        self.texts = []

    def mark(self, text):
        if text not in self.texts:
            self.texts.append(text)
        return f"<sup>{self.texts.index(text) + 1}</sup>"

    def lines(self):
        return [f"<sup>{i}</sup> {t}  " for i, t in enumerate(self.texts, 1)]


def cell_notes(key, cell):
    """The footnotes a cell calls for: its row's note (one for all the row's cells), its rounds, a
    depth that differs between the tools."""
    cpu, model, test, depth, cache = key
    where = f"{model} {test} at {depth_label(depth) if depth else 'depth 0'}"
    texts = []
    if cell.row.get("note"):
        texts.append(f"{where}: {cell.row['note']} ({cell.doc['sitting']}).")
    elif cell.rounds > 1:
        texts.append(f"{where}{', squeeze' if cache == 'squeeze' else ''}: the median of {cell.rounds} rounds "
                     f"alternated with llama.cpp ({cell.doc['sitting']}).")
    if cell.row.get("llama_cpp_depth"):
        texts.append(f"llama.cpp at depth {cell.row['llama_cpp_depth']:,}, squeezekv at {depth:,} (depth, prompt and "
                     f"generation must fit the model's 32,768 positions).")
    return texts


def table(cells, cpu, notes, what="ratio", depths=None):
    """Markdown rows (model x test) by (depth, cache) columns: one ratio a cell, or with what
    "tps" llama.cpp's / squeezekv's tokens/s."""
    cols = columns(cells, cpu, depths)
    head = "| model | test | " + " | ".join(column_label(*c) for c in cols) + " |"
    out = [head, "| --- | --- |" + " ---: |" * len(cols)]
    for model in MODELS:
        for test in TESTS:
            shown = []
            for depth, cache in cols:
                key = (cpu, model, test, depth, cache)
                cell = cells.get(key)
                if cell is None:
                    shown.append("")
                    continue
                marks = "".join(notes.mark(t) for t in cell_notes(key, cell)) if notes else ""
                if what == "ratio":
                    shown.append(fmt_ratio(cell.ratio) + marks)
                else:
                    shown.append(f"{fmt_tps(cell.llama_cpp)} / {fmt_tps(cell.squeezekv)}")
            if any(shown):
                out.append(f"| {model} | {test} | " + " | ".join(shown) + " |")
    return out


def readme_table(cells, cpus):
    """The README's table: one ratio a cell, depth 0, 4096 and 8192, every CPU."""
    depths = (0, 4096, 8192)
    cols = [(0, "full"), (4096, "full"), (4096, "squeeze"), (8192, "full"), (8192, "squeeze")]
    out = ["| CPU | model | test | depth 0 | 4096 | 4096, squeeze | 8192 | 8192, squeeze |",
           "| --- | --- | --- |" + " ---: |" * len(cols)]
    for cpu in cpus:
        first = True
        for model in MODELS:
            for test in TESTS:
                shown = [cells.get((cpu, model, test, d, c)) for d, c in cols if d in depths]
                if not any(shown):
                    continue
                label = cpu if first else ""
                first = False
                short = model.split(" Q")[0].replace("-Coder", "")
                name = short if test == "pp512" else ""
                ratios = " | ".join(fmt_ratio(c.ratio) if c else "" for c in shown)
                out.append(f"| {label} | {name} | {test} | {ratios} |")
    return out
