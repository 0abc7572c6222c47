"""Speed against llama.cpp: a ratio is squeezekv's tokens/s over llama.cpp's, a cell of rounds is
the median of the rounds' ratios, and each cell comes from the newest file that holds it, rows
kept out of the summary passed over."""
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from squeezekv_report import speed  # noqa: E402

SM = "SmolLM2-135M Q4_1"


def doc(date, sequence, rows, name="f.json"):
    return {"cpu_label": "CPU", "date": date, "sequence": sequence, "sitting": date, "file": name, "rows": rows}


def test_the_ratio_is_squeezekv_over_llama_cpp():
    assert speed.ratio(100.0, 250.0) == 2.5
    assert speed.cell_of({"llama_cpp": 40.0, "full": 50.0, "squeeze": 100.0}, "squeeze") == (2.5, 40.0, 100.0, 1)
    assert speed.cell_of({"llama_cpp": 40.0, "full": 50.0}, "squeeze") is None


def test_rounds_give_the_median_of_their_ratios():
    # The notebook's Gemma 3 squeeze at 10 % of 8192: 1.96x, 2.58x, 2.37x and 1.78x, median 2.17x.
    row = {"rounds": [{"llama_cpp": 75.63, "squeeze": 148.27}, {"llama_cpp": 73.12, "squeeze": 188.60},
                      {"llama_cpp": 72.29, "squeeze": 171.44}, {"llama_cpp": 70.33, "squeeze": 125.24}]}
    r, llama, squeezekv, n = speed.cell_of(row, "squeeze")
    assert n == 4 and speed.fmt_ratio(r) == "2.17x"
    assert r == pytest.approx((148.27 / 75.63 + 171.44 / 72.29) / 2)
    assert llama == pytest.approx((73.12 + 72.29) / 2) and squeezekv == pytest.approx((148.27 + 171.44) / 2)
    # Rounds without a cache do not count for it.
    assert speed.cell_of({"rounds": [{"llama_cpp": 10.0, "squeeze": 30.0}, {"llama_cpp": 10.0, "full": 20.0,
                                                                          "squeeze": 10.0}]}, "full")[3] == 1


def test_the_newest_file_and_its_last_row_win_and_excluded_rows_do_not():
    old = doc("2026-12-06", 6, [{"model": SM, "test": "tg128", "depth": 0, "llama_cpp": 100.0, "full": 200.0}],
              "a.json")
    new = doc("2026-12-07", 9, [{"model": SM, "test": "tg128", "depth": 0, "llama_cpp": 100.0, "full": 300.0},
                                {"model": SM, "test": "tg128", "depth": 0, "llama_cpp": 100.0, "full": 900.0,
                                 "exclude_from_summary": "one run in a fast state"}], "b.json")
    later_same_day = doc("2026-12-06", 7, [{"model": SM, "test": "pp512", "depth": 0, "llama_cpp": 1.0, "full": 2.0}],
                         "c.json")
    cells = speed.newest_cells([new, later_same_day, old])
    assert cells[("CPU", SM, "tg128", 0, "full")].ratio == 3.0
    assert cells[("CPU", SM, "tg128", 0, "full")].doc is new
    assert ("CPU", SM, "tg128", 0, "squeeze") not in cells


def test_tables_give_one_ratio_a_cell_and_the_tokens_per_second_apart():
    d = doc("2026-12-07", 1, [{"model": SM, "test": "pp512", "depth": 0, "llama_cpp": 459.48, "full": 1918.37},
                              {"model": SM, "test": "tg128", "depth": 8192, "llama_cpp": 36.63, "full": 91.82,
                               "squeeze": 256.61, "note": "a note"}])
    cells = speed.newest_cells([d])
    notes = speed.Notes()
    ratios = speed.table(cells, "CPU", notes)
    assert ratios[0] == "| model | test | depth 0 | 8192 | 8192, squeeze |"
    assert ratios[2] == f"| {SM} | pp512 | 4.18x |  |  |"
    assert ratios[3] == f"| {SM} | tg128 |  | 2.51x<sup>1</sup> | 7.01x<sup>1</sup> |"  # one note a row
    assert notes.lines() == [f"<sup>1</sup> {SM} tg128 at 8192: a note (2026-12-07).  "]
    tps = speed.table(cells, "CPU", None, what="tps")
    assert tps[3] == f"| {SM} | tg128 |  | 36.63 / 91.82 | 36.63 / 256.6 |"
    assert speed.fmt_ratio(25.25) == "25.2x" and speed.fmt_ratio(1.104) == "1.10x"
