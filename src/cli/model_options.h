// Options shared by the subcommands that run a model (-m, -t, -b, -c), declared once.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "squeezekv/engine/model.h"
#include "squeezekv/eval/perplexity.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv::cli {

struct ModelOptions {
  std::string model_path;
  int threads = 0;  // 0 = every core
  int n_batch = 512;
  int n_ctx = 0;  // 0 = the command's default
  bool no_repack = false;

  std::unique_ptr<ThreadPool> make_pool() const;
  LoadOptions load_options() const { return {.repack = !no_repack}; }
};

void add_model_options(CLI::App& app, ModelOptions& options, bool with_batch = true);
// --no-repack, for a command that declares -m itself.
void add_repack_flag(CLI::App& app, bool& no_repack);

// What the commands that score a text file share: -f, -c (default 512) and --chunks.
struct TextEvalOptions {
  std::string text_path;
  int chunks = 0;  // 0 = every whole chunk

  PerplexityOptions perplexity_options(const ModelOptions& model) const;
};

void add_text_eval_options(CLI::App& app, ModelOptions& model, TextEvalOptions& text);

}  // namespace squeezekv::cli
