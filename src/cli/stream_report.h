// `--stream` of perplexity and sweep: the options (--stream, --warmup, --segment,
// --stream-tokens) and the report of stream results as a table, JSON and CSV, written once.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/output_file.h"
#include "squeezekv/eval/stream_perplexity.h"

namespace squeezekv::cli {

struct StreamArgs {
  bool stream = false;
  StreamOptions options;
};

// Adds them (the stream's own need --stream; -c and --chunks, when the command has them, are
// refused with it) and returns the --stream flag.
CLI::Option* add_stream_options(CLI::App& app, StreamArgs& args);

// One JSON object per result, its segments included.
nlohmann::json stream_json(const StreamResult& r);

// A table on stdout: one row per result, then per segment each result's perplexity.
void print_stream_table(const std::vector<StreamResult>& results);

// One CSV row per (result, segment) plus a row with segment = "all" per result, written and closed
// through the checked writer.
void write_stream_csv(OutputFile& out, const std::vector<StreamResult>& results);

}  // namespace squeezekv::cli
