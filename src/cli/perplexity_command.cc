// `squeezekv perplexity`: llama-perplexity's protocol with any cache configuration, compared with
// the full cache in the same run.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cache_file_options.h"
#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/layer_kinds_note.h"
#include "cli/model_options.h"
#include "cli/output_file.h"
#include "cli/perplexity_json.h"
#include "cli/stream_report.h"
#include "cli/text_scoring.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/eval/continuation_perplexity.h"
#include "squeezekv/eval/perplexity.h"

namespace squeezekv::cli {
namespace {

struct PerplexityArgs {
  ModelOptions model;
  CacheOptions cache;
  CacheFileOptions files;
  TextEvalOptions text;
  StreamArgs stream;
  bool json = false;
  std::string csv_path;
};

nlohmann::json to_json(const PerplexityResult& r) {
  nlohmann::json out = perplexity_metrics_json(r);
  out.update({{"method", r.config.method}, {"budget", r.config.budget}, {"positions", to_string(r.config.positions)}});
  return out;
}

void run_stream(PerplexityArgs& a, Engine& engine, const std::vector<int32_t>& tokens, const KVCacheConfig& config,
                OutputFile& csv_out) {
  const StreamOptions& options = a.stream.options;
  const std::vector<StreamResult> results =
      score_stream(engine, tokens, {config}, a.stream, a.model.n_batch, "perplexity");
  if (csv_out.is_open()) write_stream_csv(csv_out, results);
  if (a.json) {
    nlohmann::json out = stream_json(results.front());
    out["warmup"] = options.warmup;
    out["segment"] = options.segment;
    out["text_tokens"] = tokens.size();
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%zu tokens as one stream: warm-up %d, %lld scored tokens\n", tokens.size(), options.warmup,
              static_cast<long long>(results.front().scored));
  const std::string note = span_note(config, engine.model().config().context_length);
  if (!note.empty()) std::printf("%s\n", note.c_str());
  print_stream_table(results);
}

// With --load-cache or --save-cache the text is one continuation of a cache (a loaded file's, or
// an empty one): scored after what the cache holds, then the cache saved.
void run_continuation(PerplexityArgs& a, Engine& engine, const std::vector<int32_t>& text_tokens,
                      const KVCacheConfig& config) {
  require(!a.stream.stream, "--stream", "true",
          "scores a text from an empty cache; --load-cache and --save-cache "
          "score it as one continuation of a cache (leave --stream out)");
  StartingCache start = starting_cache(a.files, a.cache, config, engine);
  std::vector<int32_t> plain = text_tokens;  // the text as a continuation: no BOS
  if (!plain.empty() && plain.front() == engine.model().tokenizer().bos()) plain.erase(plain.begin());
  const std::vector<int32_t> tokens =
      a.files.loads() ? continuation(a.files, start.history, text_tokens, plain) : text_tokens;
  const ContinuationResult r = continuation_perplexity(engine, *start.cache, tokens, a.model.n_batch);
  if (a.files.saves()) {
    std::vector<int32_t> seen = start.history;
    seen.insert(seen.end(), tokens.begin(), tokens.end());
    save_cache(a.files, engine, *start.cache, seen);
  }
  if (a.json) {
    const nlohmann::json out = {{"method", start.config.method},
                                {"cached_tokens", start.history.size()},
                                {"tokens", r.tokens},
                                {"scored", r.scored},
                                {"mean_nll", r.mean_nll},
                                {"perplexity", r.perplexity},
                                {"kv_peak_kept_bytes", r.peak_kept_bytes},
                                {"seconds", r.seconds}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%lld tokens after %zu cached, %lld scored\nmethod %s: PPL = %.4f, mean NLL = %.6f\n",
              static_cast<long long>(r.tokens), start.history.size(), static_cast<long long>(r.scored),
              cache_label(start.config).c_str(), r.perplexity, r.mean_nll);
  std::printf("KV resident: peak %.1f KiB\n", r.peak_kept_bytes / 1024.0);
}

void run(PerplexityArgs& a) {
  const bool files = a.files.loads() || a.files.saves();
  const KVCacheConfig config = a.files.loads() ? KVCacheConfig{} : a.cache.resolve();
  if (!a.files.loads()) require_effective(a.cache, config);
  check_cache_file_options(a.files);
  OutputFile csv_out("--csv", a.csv_path);  // before the work: an unwritable path fails at once
  const Model model = Model::load(a.model.model_path, a.model.load_options());
  auto pool = a.model.make_pool();
  Engine engine(model, pool.get());
  const std::vector<int32_t> tokens = tokenize_text_file(model.tokenizer(), a.text.text_path);
  if (files) return run_continuation(a, engine, tokens, config);
  if (a.stream.stream) return run_stream(a, engine, tokens, config, csv_out);
  const PerplexityOptions options = a.text.perplexity_options(a.model);
  const std::vector<PerplexityResult> results = score_chunks(engine, tokens, {config}, options, "perplexity");
  const PerplexityResult& r = results.front();
  if (a.json) {
    nlohmann::json out = to_json(r);
    out["n_ctx"] = options.n_ctx;
    out["text_tokens"] = tokens.size();
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%zu tokens, n_ctx %d, %d chunks, %lld scored tokens\n", tokens.size(), options.n_ctx, r.chunks,
              static_cast<long long>(r.scored));
  std::printf("method %s: PPL = %.4f, mean NLL = %.6f\n", cache_label(config).c_str(), r.perplexity, r.mean_nll);
  if (const std::string note = span_note(config, engine.model().config().context_length); !note.empty()) {
    std::printf("%s\n", note.c_str());
  }
  std::printf("against the full cache: KL = %.6f nats/token, top-1 agreement %.2f %%\n", r.mean_kl,
              100.0 * r.top1_agreement);
  std::printf("KV resident: mean %.1f KiB, peak %.1f KiB; a full cache: mean %.1f KiB, peak %.1f KiB\n",
              r.mean_kept_bytes / 1024.0, r.peak_kept_bytes / 1024.0, r.mean_full_bytes / 1024.0,
              r.peak_full_bytes / 1024.0);
  for (const std::string& line :
       {sliding_note(r.layer_windows),
        sliding_bytes_note(r.layer_windows, r.mean_sliding_kept_bytes, r.mean_evicting_kept_bytes)}) {
    if (!line.empty()) std::printf("%s%s\n", line.c_str(), line.starts_with("KV") ? " (mean)" : "");
  }
}

void add_perplexity_command(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand("perplexity", "perplexity on a text file (llama-perplexity's protocol)");
  add_model_options(*cmd, args->model);
  add_text_eval_options(*cmd, args->model, args->text);
  cmd->add_flag("--json", args->json, "print JSON, including per-layer values");
  CLI::Option* csv =
      cmd->add_option("--csv", args->csv_path, "--stream: write the whole and per-segment figures to this CSV file");
  csv->needs(add_stream_options(*cmd, args->stream));  // the chunked protocol writes no CSV
  // The engine feeds real attention back, so engine commands score with it (docs/notes/).
  args->cache.command_defaults = {{"method", "full"}, {"score", "attention"}};
  add_cache_options(*cmd, args->cache);
  add_cache_file_options(*cmd, args->files, /*save_after=*/false);
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kPerplexityCommand{"perplexity", 60, add_perplexity_command};

}  // namespace
}  // namespace squeezekv::cli
