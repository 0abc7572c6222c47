#include "cli/model_options.h"

#include <thread>

#include "squeezekv/base/errors.h"

namespace squeezekv::cli {

std::unique_ptr<ThreadPool> ModelOptions::make_pool() const {
  require(threads >= 0, "--threads", threads, "must be >= 0 (0 = every core)");
  const size_t n = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  return std::make_unique<ThreadPool>(n);
}

void add_repack_flag(CLI::App& app, bool& no_repack) {
  app.add_flag("--no-repack", no_repack,
               "read quantised weights as the file stores them instead of repacking them at load for the tiles "
               "(x86 with AVX2; same results; repacking makes "
               "generation, batches and prompts faster)");
}

void add_model_options(CLI::App& app, ModelOptions& o, bool with_batch) {
  app.add_option("-m,--model", o.model_path, "GGUF model file")->required();
  app.add_option("-t,--threads", o.threads, "threads (0 = every core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  add_repack_flag(app, o.no_repack);
  if (with_batch) {
    app.add_option("-b,--batch-size", o.n_batch, "prompt tokens per prefill update")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
  }
}

PerplexityOptions TextEvalOptions::perplexity_options(const ModelOptions& model) const {
  PerplexityOptions options;
  options.n_ctx = model.n_ctx;
  options.n_batch = model.n_batch;
  options.max_chunks = chunks;
  return options;
}

void add_text_eval_options(CLI::App& app, ModelOptions& model, TextEvalOptions& text) {
  model.n_ctx = 512;
  app.add_option("-f,--file", text.text_path, "text file")->required();
  app.add_option("-c,--ctx-size", model.n_ctx, "tokens per chunk")->capture_default_str();
  app.add_option("--chunks", text.chunks, "chunks to score (0 = all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
}

}  // namespace squeezekv::cli
