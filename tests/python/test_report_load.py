"""scripts/report.py's one loader: every result format it reads (`sweep --json`, `sweep --stream
--json`, `perplexity --stream --json`, `needle --json` lines, the docs/data files), and for a file
it cannot use an error that names the file."""
import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from squeezekv_report import load  # noqa: E402
from squeezekv_report.cli import main  # noqa: E402


def write(path, doc):
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_a_sweep_file_is_read_with_its_results(tmp_path):
    path = write(tmp_path / "s.json", {"model": "m", "n_ctx": 512, "results": [{"variant": "h2o", "mean_kl": 0.1}]})
    doc = load.load_sweep(path, ("variant", "mean_kl"))
    assert doc["n_ctx"] == 512 and doc["results"][0]["variant"] == "h2o"


@pytest.mark.parametrize("text, message", [
    ("", "not JSON"),
    ('{"results": [', "not JSON"),
    ('{"model": "m"}', 'no "results" list'),
    ('[1, 2]', 'no "results" list'),
    ('{"results": [{"variant": "h2o"}]}', "result 1 has no 'mean_kl'"),
    ('{"results": [3]}', "result 1 is not an object"),
])
def test_a_bad_sweep_file_is_named_with_what_is_wrong(tmp_path, text, message):
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(load.ReportError) as e:
        load.load_sweep(path, ("variant", "mean_kl"))
    assert str(e.value).startswith(path + ": ")
    assert message in str(e.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(load.ReportError, match=r"nothing\.json: cannot be read"):
        load.read_json(str(tmp_path / "nothing.json"))


def stream_result(method="window"):
    return {"method": method, "budget": 64, "positions": "span", "perplexity": 5.0, "mean_kept_bytes": 1.0,
            "segments": [{"first": 512, "scored": 10, "mean_nll": 1.6, "perplexity": 5.0}]}


def test_a_stream_sweep_needs_its_segments(tmp_path):
    good = write(tmp_path / "good.json", {"results": [stream_result()]})
    assert load.load_stream(good)["results"][0]["segments"][0]["first"] == 512
    row = stream_result()
    del row["segments"]
    bad = write(tmp_path / "bad.json", {"results": [row]})
    with pytest.raises(load.ReportError, match="result 1 has no 'segments'"):
        load.load_stream(bad)
    empty = write(tmp_path / "empty.json", {"results": []})
    with pytest.raises(load.ReportError, match="empty.json: a stream file with no result"):
        load.load_stream(empty)


def test_perplexity_stream_output_is_one_result(tmp_path):
    one = {"variant": "squeeze", "budget": 819, "tokens": 100, "perplexity": 28.7, "peak_kept_bytes": 1.0, "seconds": 3}
    path = write(tmp_path / "p.json", one)
    assert load.stream_results(path, json.loads(open(path).read())) == [one]
    with pytest.raises(load.ReportError, match="p.json: result 1 has no 'budget', 'tokens'"):
        load.stream_results(path, {"variant": "squeeze"})


NEEDLE = {k: 1 for k in load.NEEDLE_KEYS}


def test_needle_lines_pass_over_a_line_cut_short(tmp_path):
    path = write(tmp_path / "n.jsonl", json.dumps(NEEDLE) + "\n\n" + json.dumps(NEEDLE) + '\n{"task": "sin')
    assert len(load.load_needle(path)) == 2


def test_a_needle_file_without_a_cell_or_with_another_object_is_named(tmp_path):
    empty = write(tmp_path / "empty.jsonl", '{"task": "sin')
    with pytest.raises(load.ReportError, match=r"empty.jsonl: no needle cell \(1 lines cut short\)"):
        load.load_needle(empty)
    assert load.load_needle(empty, allow_empty=True) == []
    other = write(tmp_path / "other.jsonl", json.dumps(NEEDLE) + "\n" + json.dumps({"results": []}))
    with pytest.raises(load.ReportError, match=r"other.jsonl:2: not a `squeezekv needle --json` cell \(no 'task'"):
        load.load_needle(other)


DATA = {"topic": "speed", "command": ["llama-bench -m M"], "cpu": "AMD EPYC", "date": "2026-12-07",
        "sitting": "2026-12-07", "source": "docs/notes/2026-12-07.md", "rows": [{"a": 1}]}


def test_a_data_file_is_read_and_checked(tmp_path):
    doc = load.load_data(write(tmp_path / "d.json", DATA))
    assert doc["file"] == "d.json" and doc["rows"] == [{"a": 1}]
    for key, value, message in (("cpu", None, "without 'cpu'"), ("command", "llama-bench", '"command" must be a list'),
                                ("rows", [], '"rows" must be a non-empty list')):
        bad = dict(DATA)
        if value is None:
            del bad[key]
        else:
            bad[key] = value
        path = write(tmp_path / f"bad_{key}.json", bad)
        with pytest.raises(load.ReportError) as e:
            load.load_data(path)
        assert str(e.value).startswith(path + ": ") and message in str(e.value)


def test_every_committed_data_file_loads():
    topics = load.load_data_dir(str(ROOT / "docs" / "data"))
    assert {"needle", "read-once", "books", "books-storage", "needle-storage", "speed"} <= set(topics)
    for docs in topics.values():
        for doc in docs:
            assert doc["source"].startswith("docs/notes/"), doc["file"]
            note = ROOT / doc["source"].split("#")[0].split(" ")[0]
            assert note.is_file(), doc["file"]


def test_the_command_line_reports_a_bad_file_and_fails(tmp_path, capsys):
    path = write(tmp_path / "bad.json", "{")
    assert main(["sweep-tables", path]) == 1
    assert capsys.readouterr().err.startswith(f"report.py: {path}: not JSON")
