"""docs/results.md: speed against llama.cpp per CPU, model and depth, one ratio a cell."""
from . import speed
from .results_text import cpu_short, listing, notes_links, para


def speed_section(data):
    cells = speed.newest_cells(data.speed)
    out = ["## Speed against llama.cpp", "",
           para("squeezekv's tokens/s over llama.cpp's (`llama-bench`, its full F16 cache), 2 threads, quiet ",
                "machines; \"squeeze\" holds 10 % of the depth's rows (budget 410 at 4096, 819 at 8192, 1638 at 16k, ",
                "3200 at 32k). Each cell is the newest measurement of it; where the tools were alternated over ",
                "rounds, the median of the rounds' ratios."),
           "", "```sh", "llama-bench -m M -p 512 -n 128 -d 0,4096,8192 -t 2 -r 3",
           "build/squeezekv bench -m M -p 512 -n 128 -d 0,4096,8192 -t 2 -r 3 --method full",
           "build/squeezekv bench -m M -p 512 -n 128 -d 8192 -t 2 -r 3 --method squeeze --budget 819   "
           "# 410 at -d 4096", "```", "", "![Speed ratios against llama.cpp](figures/speed_ratios.svg)", ""]
    notes = speed.Notes()
    for cpu in speed.cpu_labels(data.speed):
        mine = {k: c for k, c in cells.items() if k[0] == cpu}
        docs = sorted({id(c.doc): c.doc for c in mine.values()}.values(), key=lambda d: d["file"])
        (_, model, test, depth, cache), low = min(mine.items(), key=lambda kc: kc[1].ratio)
        where = speed.depth_label(depth) if depth else "depth 0"
        files = ", ".join(f"[{d['file']}](data/{d['file']})" for d in docs)
        out += [f"### {cpu}", "",
                para(f"{cpu_short(docs[-1]['cpu'])}; {docs[-1]['build']}. Measured ",
                     f"{listing(sorted({d['date'] for d in docs}))}; data: {files}; commands and every round: ",
                     f"{notes_links(docs)}."), ""]
        out += speed.table(cells, cpu, notes)
        out += ["", para(f"Lowest: {model} {test} at {where}{', squeeze' if cache == 'squeeze' else ''}, ",
                         f"{speed.fmt_ratio(low.ratio)}. Tokens/s, llama.cpp / squeezekv (medians where a cell has ",
                         "rounds):"), ""]
        out += speed.table(cells, cpu, None, what="tps")
        out.append("")
    return out + notes.lines() + [""]


def in_short(data):
    cells = speed.newest_cells(data.speed)
    parts = []
    for cpu in speed.cpu_labels(data.speed):
        ratios = [c.ratio for k, c in cells.items() if k[0] == cpu]
        parts.append(f"{cpu} {speed.fmt_ratio(min(ratios))} to {speed.fmt_ratio(max(ratios))}")
    return "squeezekv's tokens/s over llama.cpp's, every cell of every model and depth: " + "; ".join(parts) + "."
