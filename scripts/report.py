#!/usr/bin/python3
"""Tables and plots of squeezekv's result files, and docs/results.md: one report for every format.

usage: scripts/report.py SUBCOMMAND ...   (scripts/report.py --help lists them)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from squeezekv_report.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
