"""One loader for the project's result formats: `squeezekv sweep --json` (plain and `--stream`),
`needle --json` lines, `perplexity --stream --json`, and the committed result data of docs/data.
A file that cannot be read or is not of its format raises ReportError, whose message names it."""
import glob
import json
import os


class ReportError(Exception):
    """A result file that cannot be used; the message starts with the file's path."""


def read_json(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def read_finished(path):
    """A result file's JSON, or None while its run is still going (empty or cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError:
        return None
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None


def check_rows(path, rows, keys, what):
    """Every row an object holding keys; else a ReportError naming the file and the row."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ReportError(f"{path}: {what} {i + 1} is not an object")
        missing = [k for k in keys if k not in row]
        if missing:
            raise ReportError(f"{path}: {what} {i + 1} has no {', '.join(repr(k) for k in missing)}")
    return rows


def sweep_doc(path, doc, keys=()):
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ReportError(f'{path}: not a `squeezekv sweep --json` file (no "results" list)')
    check_rows(path, doc["results"], keys, "result")
    return doc


def load_sweep(path, keys=()):
    """A `sweep --json` file (or `sweep --stream --json`): its document, each result holding keys."""
    return sweep_doc(path, read_json(path), keys)


STREAM_KEYS = ("method", "budget", "positions", "perplexity", "segments", "mean_kept_bytes")


def load_stream(path, keys=STREAM_KEYS):
    """A `sweep --stream --json` file: its document, each result with its segments."""
    doc = load_sweep(path, keys)
    if not doc["results"]:
        raise ReportError(f"{path}: a stream file with no result")
    return doc


def stream_results(path, doc):
    """The results of a `perplexity --stream --json` document (one object) or a sweep's list."""
    rows = doc.get("results", [doc]) if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ReportError(f"{path}: not a `perplexity --stream --json` or sweep file")
    return check_rows(path, rows, ("variant", "budget", "tokens", "perplexity", "peak_kept_bytes", "seconds"), "result")


NEEDLE_KEYS = ("task", "variant", "method", "budget", "kv_type", "length", "depth", "accuracy", "samples", "kv_bytes")


def load_needle(path, keys=NEEDLE_KEYS, allow_empty=False):
    """The cells of a `needle --json` file, one JSON object a line. A line cut short by an
    interrupted run is passed over (needle --resume runs it again); a line that is an object of
    another kind raises ReportError, and so does a file without any cell unless allow_empty (a
    piece whose run has not written its first cell yet)."""
    cells, cut = [], 0
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise ReportError(f"{path}: cannot be read ({e.strerror})") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            cell = json.loads(line)
        except json.JSONDecodeError:
            cut += 1
            continue
        if not isinstance(cell, dict):
            raise ReportError(f"{path}:{number}: not a `squeezekv needle --json` cell")
        missing = [k for k in keys if k not in cell]
        if missing:
            names = ", ".join(map(repr, missing))
            raise ReportError(f"{path}:{number}: not a `squeezekv needle --json` cell (no {names})")
        cells.append(cell)
    if not cells and not allow_empty:
        raise ReportError(f"{path}: no needle cell" + (f" ({cut} lines cut short)" if cut else ""))
    return cells


DATA_KEYS = ("topic", "command", "cpu", "date", "sitting", "source", "rows")


def load_data(path):
    """A docs/data file: the command(s), CPU, date and sitting, source and rows of one measurement."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: a result data file must be an object")
    missing = [k for k in DATA_KEYS if k not in doc]
    if missing:
        raise ReportError(f"{path}: result data without {', '.join(map(repr, missing))}")
    if not isinstance(doc["command"], list) or not all(isinstance(c, str) for c in doc["command"]):
        raise ReportError(f'{path}: "command" must be a list of the commands that produced the figures')
    if not isinstance(doc["rows"], list) or not doc["rows"]:
        raise ReportError(f'{path}: "rows" must be a non-empty list')
    check_rows(path, doc["rows"], (), "row")
    doc["file"] = os.path.basename(path)
    return doc


def load_data_dir(data_dir):
    """Every docs/data file, by topic, in file-name order."""
    paths = sorted(glob.glob(os.path.join(data_dir, "*.json")))
    if not paths:
        raise ReportError(f"{data_dir}: no result data (*.json)")
    by_topic = {}
    for path in paths:
        doc = load_data(path)
        by_topic.setdefault(doc["topic"], []).append(doc)
    return by_topic
