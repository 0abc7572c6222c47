#!/usr/bin/python3
"""Splits `squeezekv sweep --stream --json` results by what each segment's text is: segments whose
text is plain ASCII, and segments with other characters (in tinystories_val.txt, quotes stored as
UTF-8 read as Windows-1252, "â€œ", which a small vocabulary can only spell byte by byte). For every
method and budget (span rule): perplexity over each kind of segment, its ratio to the sliding
window's over the same segments, and the drift of that ratio from the first segment of the kind
to the last. Needs the Python module (build/python) to tokenize the text the JSON names.

usage: scripts/stream_by_text.py STREAM.json [STREAM.json ...] > by_text.md
"""
import json
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "build", "python"))
import squeezekv  # noqa: E402
from stream_tables import method_label  # noqa: E402  (the same row names as tables.md)


def segment_kinds(doc):
    """first scored position of each segment -> True when its text is plain ASCII."""
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


def main():
    rows, kinds, text = [], None, None
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        if kinds is None:
            kinds, text = segment_kinds(doc), doc["text"]
        elif doc["text"] != text:  # the segments' kinds come from one text
            sys.exit(f"{path} is a stream of {doc['text']}, not of {text}")
        rows += [r for r in doc["results"] if r["positions"] == "span"]
    by = defaultdict(dict)  # budget -> method -> row
    for r in rows:
        by[r["budget"]][method_label(r)] = r
    ascii_n = sum(kinds.values())
    print(f"{ascii_n} of {len(kinds)} segments are plain ASCII; the others hold other characters.\n")
    print("| budget | method | PPL, ASCII segments | / window | drift | PPL, other segments | / window | drift |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
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
                cells += ["{:.4f}".format(ppl), "{:.3f}".format(ppl / wppl), "{:+.1f} %".format(100 * (last / first - 1))]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
