"""scripts/report.py's subcommands: each reads result files through one loader (load) and writes
Markdown on stdout and plots (PNG and SVG) into a folder; `results` writes docs/results.md and
docs/figures from docs/data."""
import argparse
import os
import sys

from .load import ReportError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def emit(lines):
    sys.stdout.write("\n".join(lines) + "\n")


def cmd_needle(a):
    from . import needle
    from .load import load_needle
    cells = load_needle(a.needle_jsonl)
    os.makedirs(a.out_dir, exist_ok=True)
    needle.heatmaps(cells, a.out_dir, a.title, a.prefix)
    needle.memory(cells, a.out_dir, a.title, a.prefix)
    print(f"wrote {a.out_dir}/{a.prefix}_heatmap.png/.svg and {a.prefix}_memory.png/.svg")


def cmd_sweep_tables(a):
    from .sweep import sweep_tables
    emit(sweep_tables(a.sweep_json))


def cmd_sweep_plots(a):
    from .sweep import sweep_plots
    sweep_plots(a.sweep_json, a.out_dir, a.title, a.filter)


def cmd_pareto(a):
    from .sweep import pareto_report
    emit(pareto_report(a.out_dir, a.sweep_json))


def cmd_stream_tables(a):
    from .stream import stream_tables
    emit(stream_tables(a.stream_json))


def cmd_stream_by_text(a):
    from .stream import by_text
    emit(by_text(a.stream_json))


def cmd_stream_plots(a):
    from .stream import stream_plots
    stream_plots(a.stream_dir, a.out_dir)


def cmd_long_context(a):
    from .long_context import report
    emit(report(a.out_dir))


def cmd_results(a):
    from .results_figures import write_all
    from .results_page import page
    text, data = page(a.data)
    if a.check:
        with open(a.out) as f:
            if f.read() != text:
                raise ReportError(f"{a.out}: not what `scripts/report.py results` writes from {a.data}: run it")
        return
    with open(a.out, "w") as f:
        f.write(text)
    names = [] if a.no_figures else write_all(data, a.figures)
    figures = f" and {len(names)} figures in {a.figures}" if names else ""
    print(f"wrote {a.out} ({text.count(chr(10))} lines){figures}")


def cmd_readme_speed(a):
    from . import speed
    from .results_data import ResultsData
    data = ResultsData(a.data)
    emit(speed.readme_table(speed.newest_cells(data.speed), speed.cpu_labels(data.speed)))


def parser():
    p = argparse.ArgumentParser(prog="scripts/report.py", description="Tables and plots of squeezekv's result "
                                "files, and docs/results.md with its figures from docs/data.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("needle", help="heatmaps and accuracy against K/V memory of a `needle --json` file")
    s.add_argument("needle_jsonl")
    s.add_argument("out_dir")
    s.add_argument("--title", default="")
    s.add_argument("--prefix", default="needle", help="file name prefix of the plots")
    s.set_defaults(run=cmd_needle)

    s = sub.add_parser("sweep-tables", help="Markdown tables per budget of `sweep --json` files")
    s.add_argument("sweep_json", nargs="+")
    s.set_defaults(run=cmd_sweep_tables)

    s = sub.add_parser("sweep-plots", help="perplexity and KL against resident memory of a `sweep --json` file")
    s.add_argument("sweep_json")
    s.add_argument("out_dir")
    s.add_argument("--title", default="")
    s.add_argument("--filter", default="", help="only variants containing this text")
    s.set_defaults(run=cmd_sweep_plots)

    s = sub.add_parser("pareto", help="eviction x K/V storage at equal memory: the Pareto plot and tables")
    s.add_argument("out_dir")
    s.add_argument("sweep_json", nargs="+")
    s.set_defaults(run=cmd_pareto)

    s = sub.add_parser("stream-tables", help="stream perplexity per budget and position rule against the window's")
    s.add_argument("stream_json", nargs="+")
    s.set_defaults(run=cmd_stream_tables)

    s = sub.add_parser("stream-by-text",
                       help="the same split by plain-ASCII segments and the others (needs build/python)")
    s.add_argument("stream_json", nargs="+")
    s.set_defaults(run=cmd_stream_by_text)

    s = sub.add_parser("stream-plots", aliases=["stream"],
                       help="perplexity per segment against the position in the stream")
    s.add_argument("stream_dir")
    s.add_argument("out_dir")
    s.set_defaults(run=cmd_stream_plots)

    s = sub.add_parser("long-context",
                       help="tables (stdout) and plots (OUT_DIR/plots) of scripts/long_context.sh's pieces")
    s.add_argument("out_dir")
    s.set_defaults(run=cmd_long_context)

    s = sub.add_parser("results", help="docs/results.md and docs/figures/*.svg from docs/data")
    s.add_argument("--data", default=os.path.join(ROOT, "docs", "data"))
    s.add_argument("--out", default=os.path.join(ROOT, "docs", "results.md"))
    s.add_argument("--figures", default=os.path.join(ROOT, "docs", "figures"))
    s.add_argument("--no-figures", action="store_true", help="the page alone")
    s.add_argument("--check", action="store_true", help="fail unless --out is what the data gives; write nothing")
    s.set_defaults(run=cmd_results)

    s = sub.add_parser("readme-speed", help="the README's speed table (one ratio a cell) from docs/data")
    s.add_argument("--data", default=os.path.join(ROOT, "docs", "data"))
    s.set_defaults(run=cmd_readme_speed)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except ReportError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 1
    return 0
