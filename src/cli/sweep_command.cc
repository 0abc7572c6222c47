// `squeezekv sweep`: methods x budgets (x any registered parameter's values) on one
// model and text, one full-cache pass shared by all; a table on stdout, JSON and CSV files, a
// progress bar with ETA on stderr when it is a terminal.
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/layer_kinds_note.h"
#include "cli/model_options.h"
#include "cli/output_file.h"
#include "cli/perplexity_json.h"
#include "cli/stream_report.h"
#include "cli/text_scoring.h"
#include "cli/sweep_axes.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/eval/sweep.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {
namespace {

struct SweepArgs {
  ModelOptions model;
  CacheOptions cache;
  SweepSpec spec;
  SweepAxisOptions axes;
  TextEvalOptions text;
  StreamArgs stream;
  std::string json_path, csv_path;
};

nlohmann::json row(const PerplexityResult& r) {
  const KVCacheConfig& c = r.config;
  nlohmann::json out = {{"variant", sweep_variant(c)},
                        {"method", c.method},
                        {"policy", resolved_policy(c)},
                        {"allocator", resolved_allocator(c)}};
  for (const ParamSpec* spec : all_params()) {
    if (reported(*spec)) out[std::string(spec->name)] = to_json(c.get(spec->name));
  }
  out["budget"] = keeps_every_row(c) ? 0 : c.budget;
  out.update(perplexity_metrics_json(r));
  return out;
}

// The CSV's columns: the ids, every reported parameter, then the scalar metrics.
std::vector<std::string> csv_columns() {
  std::vector<std::string> out = {"variant", "method", "policy", "allocator"};
  for (const ParamSpec* spec : all_params()) {
    if (reported(*spec)) out.emplace_back(spec->name);
  }
  for (const char* metric :
       {"perplexity", "mean_nll", "mean_kl", "top1_agreement", "mean_kept_bytes", "peak_kept_bytes", "mean_full_bytes",
        "peak_full_bytes", "seconds", "mean_sliding_kept_bytes", "mean_evicting_kept_bytes"}) {
    out.emplace_back(metric);
  }
  return out;
}

void write_csv(OutputFile& out, const nlohmann::json& rows) {
  const std::vector<std::string> columns = csv_columns();
  std::string text;
  for (size_t i = 0; i < columns.size(); ++i) text += (i ? "," : "") + columns[i];
  text += "\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      const auto& v = r[columns[i]];
      if (i) text += ',';
      if (v.is_string()) text += '"' + v.get<std::string>() + '"';
      else text += v.dump();
    }
    text += "\n";
  }
  out.write(text);
  out.close();
}

// --stream: every evicting configuration over the text as one stream (a full cache would grow
// with the text, so it is left out).
void run_stream(SweepArgs& a, Engine& engine, const std::vector<int32_t>& tokens, const std::vector<KVCacheConfig>& all,
                OutputFile& json_out, OutputFile& csv_out) {
  std::vector<KVCacheConfig> configs;
  for (const KVCacheConfig& c : all) {
    if (!keeps_every_row(c)) configs.push_back(c);
  }
  require(!configs.empty(), "--methods", "full", "a stream sweep needs an evicting method");
  const StreamOptions& options = a.stream.options;
  std::fprintf(stderr, "sweep --stream: %zu configurations, warm-up %d, segment %d\n", configs.size(), options.warmup,
               options.segment);
  const std::vector<StreamResult> results = score_stream(engine, tokens, configs, a.stream, a.model.n_batch, "sweep");
  if (json_out.is_open()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const StreamResult& r : results) rows.push_back(stream_json(r));
    nlohmann::json doc = {{"model", a.model.model_path},
                          {"text", a.text.text_path},
                          {"text_tokens", tokens.size()},
                          {"stream", true},
                          {"warmup", options.warmup},
                          {"segment", options.segment},
                          {"results", rows}};
    json_out.write(doc.dump(2) + "\n");
    json_out.close();
  }
  if (csv_out.is_open()) write_stream_csv(csv_out, results);
  print_stream_table(results);
}

void run(SweepArgs& a) {
  a.spec.base = a.cache.resolve();
  a.axes.apply(a.spec);
  const std::vector<KVCacheConfig> configs = expand_sweep(a.spec);
  // Opened before the sweep runs, so that an unwritable path fails at once.
  OutputFile json_out("--json", a.json_path), csv_out("--csv", a.csv_path);
  const Model model = Model::load(a.model.model_path, a.model.load_options());
  auto pool = a.model.make_pool();
  Engine engine(model, pool.get());
  const std::vector<int32_t> tokens = tokenize_text_file(model.tokenizer(), a.text.text_path);
  if (a.stream.stream) return run_stream(a, engine, tokens, configs, json_out, csv_out);
  const PerplexityOptions options = a.text.perplexity_options(a.model);
  std::fprintf(stderr, "sweep: %zu configurations, n_ctx %d, %s chunks\n", configs.size(), options.n_ctx,
               a.text.chunks > 0 ? std::to_string(a.text.chunks).c_str() : "all");
  const std::vector<PerplexityResult> results = score_chunks(engine, tokens, configs, options, "sweep");
  nlohmann::json rows = nlohmann::json::array();
  for (const PerplexityResult& r : results) rows.push_back(row(r));
  if (json_out.is_open()) {
    nlohmann::json doc = {{"model", a.model.model_path}, {"text", a.text.text_path},   {"text_tokens", tokens.size()},
                          {"n_ctx", options.n_ctx},      {"n_batch", options.n_batch}, {"results", rows}};
    json_out.write(doc.dump(2) + "\n");
    json_out.close();
  }
  if (csv_out.is_open()) write_csv(csv_out, rows);
  // A model with sliding layers: two more columns, the kept bytes of each kind.
  const std::string note = sliding_note(results.front().layer_windows);
  if (!note.empty()) std::printf("%s\n", note.c_str());
  std::printf("%-58s %6s %9s %9s %8s %7s %10s%s\n", "variant", "budget", "PPL", "KL", "top-1", "KV KiB", "full KiB",
              note.empty() ? "" : " sliding KiB evicting KiB");
  for (const PerplexityResult& r : results) {
    std::printf("%-58s %6s %9.4f %9.5f %7.2f%% %7.1f %10.1f", sweep_variant(r.config).c_str(),
                (keeps_every_row(r.config) ? std::string("-") : std::to_string(r.config.budget)).c_str(), r.perplexity,
                r.mean_kl, 100.0 * r.top1_agreement, r.mean_kept_bytes / 1024.0, r.mean_full_bytes / 1024.0);
    if (!note.empty())
      std::printf(" %11.1f %12.1f", r.mean_sliding_kept_bytes / 1024.0, r.mean_evicting_kept_bytes / 1024.0);
    std::printf("\n");
  }
}

void add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd =
      app.add_subcommand("sweep", "compare methods at equal memory: perplexity, KL and top-1 against the full cache");
  add_model_options(*cmd, args->model);
  SweepSpec& s = args->spec;
  add_text_eval_options(*cmd, args->model, args->text);
  cmd->add_option("--methods", s.methods, "method ids (`squeezekv methods`)")->delimiter(',')->default_str("all");
  cmd->add_option("--budgets", s.budgets, "average budgets")->delimiter(',')->capture_default_str();
  add_sweep_axis_options(*cmd, args->axes);
  cmd->add_option("--json", args->json_path, "write every result, per-layer values included, to this JSON file");
  cmd->add_option("--csv", args->csv_path, "write one row per configuration to this CSV file");
  add_stream_options(*cmd, args->stream);
  args->cache.command_defaults["score"] = "attention";  // the engine feeds real attention back
  add_cache_options(*cmd, args->cache, {"budget"});
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kSweepCommand{"sweep", 80, add_sweep_command};

}  // namespace
}  // namespace squeezekv::cli
