"""squeezekv's result report: one loader for every result format (load), the plots and tables of
`sweep --json` (sweep), `needle --json` (needle), streams (stream), scripts/long_context.sh's
pieces (long_context), speed against llama.cpp (speed), and docs/results.md with its figures from
the committed data of docs/data (results_page, results_figures). scripts/report.py runs it."""
