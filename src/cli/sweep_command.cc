// `squeezekv sweep`: methods x budgets (x strengths, score sources, importances, fractions) on one
// model and text, one full-cache pass shared by all; a table on stdout, JSON and CSV files, a
// progress bar with ETA on stderr when it is a terminal.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cache_options.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/progress.h"
#include "cli/stream_report.h"
#include "squeezekv/core/errors.h"
#include "squeezekv/eval/sweep.h"
#include "squeezekv/methods/method_registry.h"

namespace squeezekv::cli {
namespace {

struct SweepArgs {
  ModelOptions model;
  CacheOptions cache;
  SweepSpec spec;
  std::vector<std::string> scores, importances;
  TextEvalOptions text;
  StreamArgs stream;
  std::string json_path, csv_path;
};

nlohmann::json row(const PerplexityResult& r) {
  const KVCacheConfig& c = r.config;
  return {{"variant", sweep_variant(c)}, {"method", c.method}, {"policy", resolved_policy(c)},
          {"allocator", resolved_allocator(c)}, {"budget", resolved_policy(c) == "full" ? 0 : c.budget},
          {"n_sink", c.n_sink}, {"strength", c.strength}, {"score", to_string(c.score)},
          {"importance", to_string(c.importance)}, {"squeeze_fraction", c.squeeze_fraction},
          {"recent", c.recent}, {"decay", c.decay}, {"kv_type", to_string(c.kv_type)},
          {"positions", to_string(c.positions)},
          {"perplexity", r.perplexity}, {"mean_nll", r.mean_nll}, {"mean_kl", r.mean_kl},
          {"top1_agreement", r.top1_agreement}, {"mean_kept_bytes", r.mean_kept_bytes},
          {"peak_kept_bytes", r.peak_kept_bytes}, {"mean_full_bytes", r.mean_full_bytes},
          {"peak_full_bytes", r.peak_full_bytes}, {"layer_budgets", r.layer_budgets},
          {"layer_mean_kept", r.layer_mean_kept}, {"layer_importance", r.layer_importance},
          {"chunks", r.chunks}, {"scored", r.scored}, {"seconds", r.seconds}};
}

const char* kCsvColumns[] = {"variant", "method", "policy", "allocator", "budget", "n_sink", "strength",
                             "score", "importance", "squeeze_fraction", "recent", "decay", "kv_type",
                             "perplexity", "mean_nll", "mean_kl", "top1_agreement", "mean_kept_bytes",
                             "peak_kept_bytes", "mean_full_bytes", "peak_full_bytes", "seconds"};

void write_csv(const std::string& path, const nlohmann::json& rows) {
  std::ofstream out(path);
  if (!out) throw InvalidArgument(invalid_value("--csv", path, "cannot open for writing"));
  for (size_t i = 0; i < std::size(kCsvColumns); ++i) out << (i ? "," : "") << kCsvColumns[i];
  out << "\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < std::size(kCsvColumns); ++i) {
      const auto& v = r[kCsvColumns[i]];
      if (i) out << ',';
      if (v.is_string()) out << '"' << v.get<std::string>() << '"';
      else out << v.dump();
    }
    out << "\n";
  }
}

// --stream: every evicting configuration over the text as one stream (a full cache would grow
// with the text, so it is left out).
void run_stream(SweepArgs& a, Engine& engine, const std::vector<int32_t>& tokens,
                const std::vector<KVCacheConfig>& all) {
  std::vector<KVCacheConfig> configs;
  for (const KVCacheConfig& c : all) {
    if (resolved_policy(c) != "full") configs.push_back(c);
  }
  require(!configs.empty(), "--methods", "full", "a stream sweep needs an evicting method");
  StreamOptions options = a.stream.options;
  options.n_batch = a.model.n_batch;
  std::fprintf(stderr, "sweep --stream: %zu configurations, warm-up %d, segment %d\n", configs.size(),
               options.warmup, options.segment);
  std::vector<StreamResult> results;
  {
    Progress progress("sweep --stream: scored tokens (K)");
    results = evaluate_stream_perplexity(engine, tokens, configs, options, [&](int64_t done, int64_t total) {
      progress(int(done / 1024), int(total / 1024));
    });
  }
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    if (!out) throw InvalidArgument(invalid_value("--json", a.json_path, "cannot open for writing"));
    nlohmann::json rows = nlohmann::json::array();
    for (const StreamResult& r : results) rows.push_back(stream_json(r));
    nlohmann::json doc = {{"model", a.model.model_path}, {"text", a.text.text_path}, {"text_tokens", tokens.size()},
                          {"stream", true}, {"warmup", options.warmup}, {"segment", options.segment},
                          {"results", rows}};
    out << doc.dump(2) << "\n";
  }
  if (!a.csv_path.empty()) write_stream_csv(a.csv_path, results);
  print_stream_table(results);
}

void run(SweepArgs& a) {
  a.spec.base = a.cache.resolve();
  a.spec.scores.clear();
  for (const auto& s : a.scores) a.spec.scores.push_back(parse_score_source(s));
  a.spec.importances.clear();
  for (const auto& s : a.importances) a.spec.importances.push_back(parse_importance(s));
  const std::vector<KVCacheConfig> configs = expand_sweep(a.spec);
  const Model model = Model::load(a.model.model_path);
  auto pool = a.model.make_pool();
  Engine engine(model, pool.get());
  const std::vector<int32_t> tokens = tokenize_text_file(model.tokenizer(), a.text.text_path);
  if (a.stream.stream) return run_stream(a, engine, tokens, configs);
  const PerplexityOptions options = a.text.perplexity_options(a.model);
  std::fprintf(stderr, "sweep: %zu configurations, n_ctx %d, %s chunks\n", configs.size(), options.n_ctx,
               a.text.chunks > 0 ? std::to_string(a.text.chunks).c_str() : "all");
  std::vector<PerplexityResult> results;
  {
    Progress progress("sweep: chunk passes");
    results = evaluate_perplexity(engine, tokens, configs, options, std::ref(progress));
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const PerplexityResult& r : results) rows.push_back(row(r));
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    if (!out) throw InvalidArgument(invalid_value("--json", a.json_path, "cannot open for writing"));
    nlohmann::json doc = {{"model", a.model.model_path}, {"text", a.text.text_path}, {"text_tokens", tokens.size()},
                          {"n_ctx", options.n_ctx}, {"n_batch", options.n_batch}, {"results", rows}};
    out << doc.dump(2) << "\n";
  }
  if (!a.csv_path.empty()) write_csv(a.csv_path, rows);
  std::printf("%-58s %6s %9s %9s %8s %7s %10s\n", "variant", "budget", "PPL", "KL", "top-1", "KV KiB", "full KiB");
  for (const PerplexityResult& r : results) {
    std::printf("%-58s %6s %9.4f %9.5f %7.2f%% %7.1f %10.1f\n", sweep_variant(r.config).c_str(),
                (resolved_policy(r.config) == "full" ? std::string("-") : std::to_string(r.config.budget)).c_str(),
                r.perplexity, r.mean_kl, 100.0 * r.top1_agreement, r.mean_kept_bytes / 1024.0,
                r.mean_full_bytes / 1024.0);
  }
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "compare methods at equal memory: perplexity, KL and top-1 against the full cache");
  add_model_options(*cmd, args->model);
  SweepSpec& s = args->spec;
  add_text_eval_options(*cmd, args->model, args->text);
  cmd->add_option("--methods", s.methods, "method ids")->delimiter(',')->capture_default_str();
  cmd->add_option("--budgets", s.budgets, "average budgets")->delimiter(',')->capture_default_str();
  cmd->add_option("--strengths", s.strengths, "squeeze strengths; default: the single cache option")->delimiter(',');
  cmd->add_option("--scores", args->scores, "score sources: key-proxy, attention; default: the single cache option")->delimiter(',');
  cmd->add_option("--importances", args->importances, "squeeze importances: key-dispersion, hidden-cosine; default: the single cache option")->delimiter(',');
  cmd->add_option("--fractions", s.fractions, "squeeze fractions (hidden-cosine); default: the single cache option")->delimiter(',');
  cmd->add_option("--recents", s.recents, "recent-window shares (cumulative policies); default: the single cache option")->delimiter(',');
  cmd->add_option("--decays", s.decays, "score decays (cumulative policies); default: the single cache option")->delimiter(',');
  cmd->add_option("--json", args->json_path, "write every result, per-layer values included, to this JSON file");
  cmd->add_option("--csv", args->csv_path, "write one row per configuration to this CSV file");
  add_stream_options(*cmd, args->stream);
  args->cache.score = "attention";  // the engine feeds real attention back
  add_cache_options(*cmd, args->cache, /*with_budget=*/false, /*with_strength=*/false);
  cmd->callback([args] { run(*args); });
}

}  // namespace squeezekv::cli
