// `squeezekv synth`: the reference library's synthetic sweep on a mock model, any method, readable or JSON.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/output_file.h"
#include "cli/progress.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/eval/synth.h"

namespace squeezekv::cli {
namespace {

struct SynthArgs {
  CacheOptions cache;
  int head_dim = KVCacheConfig{}.head_dim;
  SynthOptions synth;
  bool json = false;
  std::string out;
};

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

nlohmann::json to_json(const SynthResult& r) {
  return {{"method", r.method},         {"n_layers", r.n_layers},         {"seq_len", r.seq_len},
          {"budget", r.budget},         {"strength", r.strength},         {"concentrations", r.concentrations},
          {"schedule", r.schedule},     {"held_budgets", r.held_budgets}, {"scheduled_rows", r.scheduled_rows},
          {"held_rows", r.held_rows},   {"wasted_rows", r.wasted_rows},   {"kept", r.kept},
          {"kept_bytes", r.kept_bytes}, {"full_bytes", r.full_bytes},     {"compression_ratio", r.compression_ratio},
          {"seconds", r.seconds}};
}

void run(SynthArgs& a) {
  a.synth.base = a.cache.resolve({{"head_dim", std::to_string(a.head_dim)}});
  OutputFile out("--out", a.out);  // before the work: an unwritable path fails at once
  const auto start = std::chrono::steady_clock::now();
  std::vector<SynthResult> results;
  {
    Progress progress("synth: configurations");
    results = run_synth(a.synth, std::ref(progress));
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json doc = {{"kv_heads", a.synth.kv_heads},      {"head_dim", a.synth.base.head_dim},
                        {"n_sink", a.synth.base.n_sink},     {"decode_tokens", a.synth.decode_tokens},
                        {"threads", a.synth.threads},        {"total_seconds", total_s},
                        {"results", nlohmann::json::array()}};
  for (const SynthResult& r : results) doc["results"].push_back(to_json(r));
  out.write(doc.dump(2) + "\n");
  out.close();
  if (a.json) {
    std::printf("%s\n", doc.dump(2).c_str());
    return;
  }
  std::printf("mock model: %d KV heads, head_dim %d, %d sinks, layer i keys = (1 - i/(L-1)) N(0,1) + 3 i/(L-1)\n\n",
              a.synth.kv_heads, a.synth.base.head_dim, a.synth.base.n_sink);
  std::printf("%-9s %3s %5s %6s %8s %7s %7s %11s %11s %6s %8s\n", "method", "L", "seq", "budget", "strength", "conc0",
              "concL", "kept KiB", "full KiB", "ratio", "ms");
  for (const SynthResult& r : results) {
    std::printf("%-9s %3d %5d %6d %8.2f %7.3f %7.3f %11.1f %11.1f %6.2f %8.1f\n", r.method.c_str(), r.n_layers,
                r.seq_len, r.budget, r.strength, r.concentrations.front(), r.concentrations.back(),
                double(r.kept_bytes) / 1024.0, double(r.full_bytes) / 1024.0, r.compression_ratio, r.seconds * 1e3);
    std::printf(
        "          schedule: %s\n          held:     %s (conserved; rows scheduled %lld, held %lld, wasted %lld)\n"
        "          kept:     %s\n",
        join(r.schedule).c_str(), join(r.held_budgets).c_str(), static_cast<long long>(r.scheduled_rows),
        static_cast<long long>(r.held_rows), static_cast<long long>(r.wasted_rows), join(r.kept).c_str());
  }
  std::printf("\n%zu configurations in %.2f s (%d threads)\n", results.size(), total_s, a.synth.threads);
}

void add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "sweep a mock model whose deeper layers are more concentrated");
  SynthOptions& s = args->synth;
  s.threads = std::max(1, int(std::thread::hardware_concurrency()));
  cmd->add_option("--layers", s.layers, "layer counts, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--seq-len", s.seq_lens, "prompt lengths, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--budget", s.budgets, "average budgets, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--strength", s.strengths, "squeeze strengths, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--heads", s.kv_heads, "KV heads per layer")->capture_default_str();
  cmd->add_option("--head-dim", args->head_dim, "head dimension")->capture_default_str();
  cmd->add_option("--decode", s.decode_tokens, "tokens decoded per layer after the prompt")->capture_default_str();
  cmd->add_option("-t,--threads", s.threads, "configurations run in parallel")->capture_default_str();
  cmd->add_option("--seed", s.seed, "random seed of the mock keys")->capture_default_str();
  cmd->add_flag("--json", args->json, "print JSON instead of the table");
  cmd->add_option("--out", args->out, "also write the JSON to this file");
  add_cache_options(*cmd, args->cache, {"budget", "strength"});  // both are lists here
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kSynthCommand{"synth", 30, add_synth_command};

}  // namespace
}  // namespace squeezekv::cli
