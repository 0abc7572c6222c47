"""The docs/data files gathered for docs/results.md and its figures: the newest figure of each
needle cell, kvzip cell and book, and the speed files. Methods keep the notebook's labels; a bare
"squeeze" is squeeze with its default importance, key dispersion."""
from collections import defaultdict

from .load import ReportError, load_data_dir

SQUEEZE = "squeeze (key dispersion)"
SHARES = (2, 5, 10, 20, 40)


def canonical(method):
    return SQUEEZE if method == "squeeze" else method


def by_date(docs):
    return sorted(docs, key=lambda d: (d["date"], d.get("sequence", 0), d["file"]))


def reference_chunk(doc, row):
    """A kvzip row scored with the reference's chunks of 2048 tokens, not the default 512."""
    return "kvzip" in row["method"] and row.get("kvzip_chunk", doc.get("kvzip_chunk")) == 2048


def one(docs, topic, path):
    if not docs:
        raise ReportError(f"{path}: no result data of topic {topic!r}")
    return by_date(docs)[-1]


class ResultsData:
    def __init__(self, data_dir):
        topics = load_data_dir(data_dir)
        get = lambda t: topics.get(t, [])  # noqa: E731
        # needle grids: (mode, length) -> method -> share (None: the full cache) -> accuracy %
        self.grid = defaultdict(lambda: defaultdict(dict))
        self.grid_docs = by_date(get("needle"))
        for doc in self.grid_docs:
            for r in doc["rows"]:
                if "accuracy_pct" in r:
                    self.grid[(doc["mode"], r["length"])][canonical(r["method"])][r["share_pct"]] = r["accuracy_pct"]
        # needles found by depth: (mode, length, method, share, depth) -> (found, of)
        self.depths = {}
        for doc in by_date(get("needle") + get("needle-by-depth") + get("read-once")):
            for r in doc["rows"]:
                if "depth" in r and not reference_chunk(doc, r):
                    mode = r.get("mode") or doc.get("mode") or "query-agnostic"
                    key = (mode, r["length"], canonical(r["method"]), r["share_pct"], r["depth"])
                    self.depths[key] = (r["found"], r["of"])
        # read once, ask later: (length, method, share, questions) -> (found, of, doc); and the
        # counts at the reference's chunk of 2048 where a run gave them
        self.read_once, self.chunk2048 = {}, {}
        for doc in by_date(get("read-once")):
            for r in doc["rows"]:
                if "depth" in r:
                    continue
                key = (r["length"], canonical(r["method"]), r["share_pct"], doc.get("questions", 1))
                if reference_chunk(doc, r):
                    self.chunk2048[key] = (r["found"], r["of"], doc)
                else:
                    self.read_once[key] = (r["found"], r["of"], doc)
        # A read-once cell of 10 needles all found (5 depths x 2 samples) is 2 of 2 at every depth.
        for (length, method, share, questions), (f, of, _) in self.read_once.items():
            key = ("query-agnostic", length, method, share)
            if questions == 1 and f == of == 10 and not any(k[:4] == key for k in self.depths):
                for depth in (0, 0.25, 0.5, 0.75, 1):
                    self.depths[key + (depth,)] = (2, 2)
        self.read_once_docs = by_date(get("read-once"))
        self.demo = one(get("read-once-demo"), "read-once-demo", data_dir)
        self.cost = one(get("read-once-cost"), "read-once-cost", data_dir)
        self.books = {}
        for doc in by_date(get("books")):
            self.books[doc["n_ctx"]] = doc
        self.gemma = by_date(get("books-gemma3"))
        self.storage = one(get("books-storage"), "books-storage", data_dir)
        self.needle_storage = one(get("needle-storage"), "needle-storage", data_dir)
        self.speed = by_date(get("speed"))
        if not self.speed:
            raise ReportError(f"{data_dir}: no result data of topic 'speed'")

    def book_kl(self, ctx):
        """method -> share -> (KL Emma, KL KJV)"""
        out = defaultdict(dict)
        for r in self.books[ctx]["rows"]:
            out[canonical(r["method"])][r["share_pct"]] = (r["kl_emma"], r["kl_kjv"])
        return out
