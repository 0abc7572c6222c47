"""scripts/report.py long-context's storage x eviction table of a book, on hand-made sweep results:
each cell is the KL beside the resident bytes as a share of the f16 full cache's, a file without
that f16 row or cut short is named and left out, never divided by nothing."""
import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from squeezekv_report import long_context as report  # noqa: E402


def row(method, kv_type, budget, kl, kept, full=1000.0):
    return {"method": method, "kv_type": kv_type, "budget": budget, "mean_kl": kl,
            "mean_kept_bytes": kept, "mean_full_bytes": full}


def write(tmp_path, name, rows):
    (tmp_path / name).write_text(json.dumps({"results": rows}))


def test_storage_rows_show_kl_and_bytes_against_the_f16_full_cache(tmp_path):
    write(tmp_path, "books_storage_4096_emma.json", [
        row("full", "f16", 0, 0.0, 1000.0),
        row("full", "q4_0", 0, 0.0123, 312.5, full=312.5),
        row("h2o", "f16", 410, 0.05, 100.0),
        row("h2o", "q4_0", 410, 0.0612, 31.0, full=312.5),
        row("h2o", "q4_0", 819, 0.03, 62.0, full=312.5),
    ])
    lines = report.storage_book_tables(str(tmp_path))
    assert lines[0] == "### Storage x eviction: emma, n_ctx 4096"
    assert "| method | storage | all rows | 10 % | 20 % |" in lines
    # The q4_0 rows are shares of the f16 cache's 1000 bytes, not of their own 312.5.
    assert "| full | q4_0 | 0.0123 (31 %) |  |  |" in lines
    assert "| h2o | q4_0 |  | 0.0612 (3 %) | 0.0300 (6 %) |" in lines
    assert "| h2o | f16 |  | 0.0500 (10 %) |  |" in lines


def test_a_file_without_its_f16_reference_or_cut_short_is_named_and_left_out(tmp_path):
    write(tmp_path, "books_storage_4096_kjv.json", [row("full", "q8_0", 0, 0.001, 530.0)])
    (tmp_path / "books_storage_8192_emma.json").write_text('{"results": [')
    lines = report.storage_book_tables(str(tmp_path))
    assert "(books_storage_4096_kjv.json: no f16 full-cache row, left out)" in lines
    assert "(books_storage_8192_emma.json: not complete, left out)" in lines
    assert not any(line.startswith("|") for line in lines)


def test_the_books_table_skips_the_storage_files(tmp_path):
    write(tmp_path, "books_storage_4096_emma.json", [row("full", "f16", 0, 0.0, 1000.0)])
    assert report.books_tables(str(tmp_path)) == []


def needle_cell(**over):
    cell = {"task": "single", "model": "m", "question_in_prompt": False, "samples": 2, "method": "h2o",
            "variant": "h2o", "budget": 410, "budget_share": 0.1, "kv_type": "f16", "length": 4096, "depth": 0.5,
            "accuracy": 0.5, "kv_bytes": 100.0, "full_kv_bytes": 1000.0}
    cell.update(over)
    return cell


def test_the_whole_report_names_what_has_not_run_and_passes_a_cut_short_line(tmp_path):
    lines = [json.dumps(needle_cell(method="full", variant="full", budget=0, budget_share=1.0, accuracy=1.0,
                                    kv_bytes=1100.0)),
             json.dumps(needle_cell()), '{"task": "sin']
    (tmp_path / "needle_qag.jsonl").write_text("\n".join(lines))
    (tmp_path / "needle_qaw.jsonl").write_text("")  # started, no cell yet
    out = report.report(str(tmp_path), plots=False)
    assert "| h2o | 50 % (10 %) |  |" in out
    assert "| full |  | 100 % (110 %) |" in out
    assert out[-2].startswith("Not run yet: needle_qaw, needle_storage,")
    assert out[-2].endswith("books, stream.")
