"""scripts/report.py stream-by-text on a hand-made stream: segments are told apart by their text (plain
ASCII or not, found by tokenizing the text the JSON names), and perplexities, ratios to the window
and drifts are pooled per kind exactly."""
import json
import math
import subprocess
import sys

from conftest import MODEL_PATH, ROOT

SCRIPT = ROOT / "scripts" / "report.py"


def segment(first, scored, nll):
    return {"first": first, "scored": scored, "mean_nll": nll, "perplexity": math.exp(nll),
            "mean_kept_bytes": 0.0, "peak_kept_bytes": 0.0}


def result(method, policy, segments):
    return {"method": method, "policy": policy, "score": "attention", "budget": 64, "positions": "span",
            "segments": segments, "perplexity": 0.0}


def test_segments_are_split_by_their_text(tmp_path, model):
    text = "Once upon a time there was a little cat who liked to play. " * 12 + \
           "She said \u00e2\u20ac\u0153hi\u00e2\u20ac to the dog and ran. " * 6
    text_path = tmp_path / "stream.txt"
    text_path.write_text(text, encoding="utf-8")
    tokens = list(model.tokenize_file(str(text_path)))
    q = next(i for i in range(1, len(tokens)) if not model.detokenize(tokens[1:i + 1]).isascii())
    h, r = (q - 1) // 2, (len(tokens) - q) // 2
    bounds = [(1, h), (1 + h, q - 1 - h), (q, r), (q + r, len(tokens) - q - r)]
    kinds = [model.detokenize(tokens[f:f + n]).isascii() for f, n in bounds]
    assert kinds == [True, True, False, False]

    window_nll, method_nll = [1.0, 1.2, 2.0, 2.0], [0.9, 1.1, 2.1, 2.3]
    doc = {"model": str(MODEL_PATH), "text": str(text_path), "results": [
        result("window", "window", [segment(f, n, x) for (f, n), x in zip(bounds, window_nll)]),
        result("h2o", "cumulative", [segment(f, n, x) for (f, n), x in zip(bounds, method_nll)]),
    ]}
    json_path = tmp_path / "stream.json"
    json_path.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, str(SCRIPT), "stream-by-text", str(json_path)], check=True,
                         capture_output=True, text=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| 64 | h2o |"))
    cells = [c.strip() for c in row.strip("|").split("|")]

    def pooled(nll, idx):
        n = sum(bounds[i][1] for i in idx)
        return math.exp(sum(nll[i] * bounds[i][1] for i in idx) / n)

    ascii_ppl, other_ppl = pooled(method_nll, [0, 1]), pooled(method_nll, [2, 3])
    assert cells[2] == "{:.4f}".format(ascii_ppl)
    assert cells[3] == "{:.3f}".format(ascii_ppl / pooled(window_nll, [0, 1]))
    # drift: the ratio to the window in the kind's last segment over its first
    assert cells[4] == "{:+.1f} %".format(100 * (math.exp(1.1 - 1.2) / math.exp(0.9 - 1.0) - 1))
    assert cells[5] == "{:.4f}".format(other_ppl)
    assert cells[6] == "{:.3f}".format(other_ppl / pooled(window_nll, [2, 3]))
    assert cells[7] == "{:+.1f} %".format(100 * (math.exp(0.3) / math.exp(0.1) - 1))
    assert out.startswith("2 of 4 segments are plain ASCII")
