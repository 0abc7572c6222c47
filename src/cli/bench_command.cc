// `squeezekv bench`: llama-bench for squeezekv. Prompt processing and generation speed over
// repetitions, thread counts, starting depths and cache configurations (comma lists in --method
// and --score give one row each, measured side by side), with the memory-bandwidth probe run
// after every generation repetition. Tables go to stdout (md, csv or json); progress to stderr
// (MilestoneLog: every line on a terminal, at most one a minute elsewhere; each fill to a depth
// through Progress: a bar on a terminal, a line a minute elsewhere).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/layer_kinds_note.h"
#include "cli/model_options.h"
#include "cli/progress.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/model_cache.h"
#include "squeezekv/eval/bench.h"
#include "squeezekv/ops/cpu_info.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv::cli {
namespace {

struct BenchArgs {
  std::string model_path;
  bool no_repack = false;
  CacheOptions cache;
  BenchOptions bench;
  std::string output = "md";
  int bandwidth_mib = 1024;  // 0 = no probe
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Every (method, score, positions, kv_type) combination of the comma lists, each resolved and
// validated; a method whose policy never reads attention gets one row, not one per score source.
std::vector<KVCacheConfig> cache_configs(const CacheOptions& options) {
  std::vector<KVCacheConfig> out;
  for (const std::string& method : split(options.text("method"))) {
    bool first = true;
    for (const std::string& score : split(options.text("score"))) {
      for (const std::string& positions : split(options.text("positions"))) {
        for (const std::string& kv_type : split(options.text("kv_type"))) {
          const KVCacheConfig config =
              options.resolve({{"method", method}, {"score", score}, {"positions", positions}, {"kv_type", kv_type}});
          const bool scored =
              config.score == ScoreSource::key_proxy || KVCacheFactory::create(config, 1)->wants_attention();
          if (first || scored) out.push_back(config);
        }
      }
      first = false;
    }
  }
  require(!out.empty(), "--method", options.text("method"), "names no method");
  return out;
}

double gb(double bytes) { return bytes / 1e9; }

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

struct Derived {
  double weight_gbps = 0;  // tg: weight bytes read per second
  double share = 0;        // of the probe's bandwidth at this thread count (0: no probe)
  double gflops = 0;       // pp: matmul GFLOP/s (int8 operations for quantised weights)
};

Derived derive(const BenchRow& row, const ModelFacts& facts) {
  Derived d;
  const double tps = row.tokens_per_second.median;
  if (row.generation) {
    d.weight_gbps = gb(double(facts.weight_bytes_per_token) * tps);
    d.share = row.bandwidth_share.median;  // the median of the per-repetition ratios
  } else {
    // Every layer's products per token; the output projection once per prompt (its last token).
    const double macs =
        double(facts.matmul_macs_per_token - facts.output_macs) + double(facts.output_macs) / std::max(1, row.n_tokens);
    d.gflops = 2.0 * macs * tps / 1e9;
  }
  return d;
}

void print_md(const ModelFacts& facts, const std::vector<BandwidthResult>& bandwidth, const std::vector<BenchRow>& rows,
              uint64_t peak_rss) {
  std::printf("model: %s (%s, %.1f MiB, %.3f M params; a decode step reads %.4f GB of weights)\n", facts.path.c_str(),
              facts.weight_type.c_str(), double(facts.file_bytes) / (1u << 20), double(facts.n_params) / 1e6,
              gb(double(facts.weight_bytes_per_token)));
  for (const BandwidthResult& b : bandwidth) {
    std::printf(
        "memory bandwidth, streaming read of %zu MiB after each generation repetition, %d thread(s): "
        "%.1f GB/s (median, min %.1f, max %.1f)\n",
        b.bytes >> 20, b.threads, gb(b.bytes_per_second.median), gb(b.bytes_per_second.min),
        gb(b.bytes_per_second.max));
  }
  const CpuInfo cpu = cpu_info();
  std::printf("cpu: %s, %.0f MHz reported; SIMD target %s; int8 dots: %s; weights repacked at load: %.1f MiB\n",
              cpu.model.c_str(), cpu.mhz, cpu.simd_target.c_str(), cpu.int8_dot.c_str(),
              double(facts.repacked_bytes) / (1 << 20));
  std::printf("peak resident memory: %.1f MiB\n", double(peak_rss) / (1 << 20));
  if (!rows.empty()) {
    if (const std::string note = sliding_note(rows.front().layer_windows); !note.empty()) {
      std::printf("%s; KV MiB below is both kinds (--json and -o csv give each)\n", note.c_str());
    }
  }
  std::printf("\n");
  std::printf(
      "| threads | cache | test | depth | t/s (median ± sd) | min | max | time vs 1st cache [min, max] | weights GB/s "
      "| %% of bandwidth | GFLOP/s | rows/layer | KV MiB |\n");
  std::printf("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const BenchRow& r : rows) {
    const Derived d = derive(r, facts);
    const Spread& s = r.tokens_per_second;
    const Spread& v = r.time_vs_first_cache;
    std::string relative = fixed(v.median, 3);  // appended piecewise: g++ 12 warns on chained +
    relative.append(" [").append(fixed(v.min, 3)).append(", ").append(fixed(v.max, 3)).append("]");
    std::printf("| %d | %s | %s | %d | %s ± %s | %s | %s | %s | %s | %s | %s | %lld | %.1f |\n", r.threads,
                r.cache.c_str(), r.test().c_str(), r.depth, fixed(s.median, 2).c_str(), fixed(s.stddev, 2).c_str(),
                fixed(s.min, 2).c_str(), fixed(s.max, 2).c_str(), relative.c_str(),
                r.generation ? fixed(d.weight_gbps, 2).c_str() : "", d.share > 0 ? fixed(100 * d.share, 1).c_str() : "",
                r.generation ? "" : fixed(d.gflops, 1).c_str(), static_cast<long long>(r.rows_per_layer),
                double(r.kv_kept_bytes) / (1 << 20));
  }
}

// --profile: each row's time per token by operation, in ms, and each operation's share of the
// timed pass (the step's time outside the engine's passes, such as the sampler, is not in it).
void print_profile_md(const std::vector<BenchRow>& rows) {
  std::printf("\ntime per token by operation, ms (share of the pass):\n\n| threads | cache | test | depth |");
  for (size_t op = 0; op < kEngineOps; ++op) std::printf(" %s |", std::string(to_string(EngineOp(op))).c_str());
  std::printf(" pass |\n| ---: | --- | --- | ---: |");
  for (size_t op = 0; op <= kEngineOps; ++op) std::printf(" ---: |");
  std::printf("\n");
  for (const BenchRow& r : rows) {
    const double total = r.op_seconds.total();
    std::printf("| %d | %s | %s | %d |", r.threads, r.cache.c_str(), r.test().c_str(), r.depth);
    for (size_t op = 0; op < kEngineOps; ++op) {
      const double sec = r.op_seconds.seconds(EngineOp(op));
      std::printf(" %.4f (%.0f %%) |", 1e3 * sec, total > 0 ? 100 * sec / total : 0.0);
    }
    std::printf(" %.4f |\n", 1e3 * total);
  }
}

void print_csv(const ModelFacts& facts, const std::vector<BenchRow>& rows) {
  std::printf(
      "model,weight_type,threads,cache,method,budget,score,test,depth,n_tokens,median_tps,mean_tps,stddev_tps,"
      "min_tps,max_tps,time_vs_first_median,time_vs_first_min,time_vs_first_max,weight_gbps,bandwidth_share,gflops,"
      "rows_per_layer,kv_kept_bytes,cpu,simd_target,kv_sliding_kept_bytes,kv_evicting_kept_bytes\n");
  const CpuInfo cpu = cpu_info();
  for (const BenchRow& r : rows) {
    const Derived d = derive(r, facts);
    const Spread& s = r.tokens_per_second;
    const Spread& v = r.time_vs_first_cache;
    std::printf(
        "%s,%s,%d,%s,%s,%d,%s,%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%lld,%zu,\"%s\",%s,%zu,%"
        "zu\n",
        facts.path.c_str(), facts.weight_type.c_str(), r.threads, r.cache.c_str(), r.config.method.c_str(),
        r.config.budget, to_string(r.config.score).c_str(), r.test().c_str(), r.depth, r.n_tokens, s.median, s.mean,
        s.stddev, s.min, s.max, v.median, v.min, v.max, d.weight_gbps, d.share, d.gflops,
        static_cast<long long>(r.rows_per_layer), r.kv_kept_bytes, cpu.model.c_str(), cpu.simd_target.c_str(),
        r.kv_sliding_kept_bytes, r.kv_evicting_kept_bytes);
  }
}

void print_json(const ModelFacts& facts, const std::vector<BandwidthResult>& bandwidth,
                const std::vector<BenchRow>& rows, uint64_t peak_rss) {
  nlohmann::json out;
  out["model"] = {{"path", facts.path},
                  {"name", facts.name},
                  {"weight_type", facts.weight_type},
                  {"file_bytes", facts.file_bytes},
                  {"n_params", facts.n_params},
                  {"weight_bytes_per_token", facts.weight_bytes_per_token},
                  {"matmul_macs_per_token", facts.matmul_macs_per_token},
                  {"repacked_bytes", facts.repacked_bytes}};
  out["peak_rss_bytes"] = peak_rss;
  const CpuInfo cpu = cpu_info();
  out["cpu"] = {{"model", cpu.model}, {"mhz", cpu.mhz}, {"simd_target", cpu.simd_target}, {"int8_dot", cpu.int8_dot}};
  out["bandwidth"] = nlohmann::json::array();
  for (const BandwidthResult& b : bandwidth) {
    out["bandwidth"].push_back({{"threads", b.threads},
                                {"bytes", b.bytes},
                                {"median_bytes_per_second", b.bytes_per_second.median},
                                {"samples", b.bytes_per_second.samples}});
  }
  out["results"] = nlohmann::json::array();
  for (const BenchRow& r : rows) {
    const Derived d = derive(r, facts);
    const Spread& s = r.tokens_per_second;
    out["results"].push_back({{"threads", r.threads},
                              {"cache", r.cache},
                              {"method", r.config.method},
                              {"budget", r.config.budget},
                              {"score", to_string(r.config.score)},
                              {"test", r.test()},
                              {"depth", r.depth},
                              {"n_tokens", r.n_tokens},
                              {"median_tps", s.median},
                              {"mean_tps", s.mean},
                              {"stddev_tps", s.stddev},
                              {"min_tps", s.min},
                              {"max_tps", s.max},
                              {"samples_tps", s.samples},
                              {"time_vs_first_cache",
                               {{"median", r.time_vs_first_cache.median},
                                {"min", r.time_vs_first_cache.min},
                                {"max", r.time_vs_first_cache.max},
                                {"samples", r.time_vs_first_cache.samples}}},
                              {"weight_gbps", d.weight_gbps},
                              {"bandwidth_share", d.share},
                              {"bandwidth_share_samples", r.bandwidth_share.samples},
                              {"probe_bytes_per_second_samples", r.bandwidth.samples},
                              {"gflops", d.gflops},
                              {"rows_per_layer", r.rows_per_layer},
                              {"kv_kept_bytes", r.kv_kept_bytes},
                              {"kv_sliding_kept_bytes", r.kv_sliding_kept_bytes},
                              {"kv_evicting_kept_bytes", r.kv_evicting_kept_bytes},
                              {"layer_windows", r.layer_windows}});
    if (r.op_seconds.total() > 0) {
      nlohmann::json ops;
      for (size_t op = 0; op < kEngineOps; ++op) {
        ops[std::string(to_string(EngineOp(op)))] = 1e3 * r.op_seconds.seconds(EngineOp(op));
      }
      out["results"].back()["op_ms_per_token"] = ops;
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
}

void run(BenchArgs& a) {
  require(a.output == "md" || a.output == "csv" || a.output == "json", "-o", a.output, "must be md, csv or json");
  require(a.bandwidth_mib >= 0 && a.bandwidth_mib <= (1 << 16), "--bandwidth-mib", a.bandwidth_mib,
          "must lie in [0, 65536] (0 = no probe)");
  // Token counts size buffers and the cache: capped before any arithmetic (run_bench checks >= 0).
  for (int n : a.bench.n_gen) require(n <= (1 << 20), "n_gen", n, "must be <= 1048576");
  for (int n : a.bench.n_prompt) require(n <= (1 << 20), "n_prompt", n, "must be <= 1048576");
  for (int n : a.bench.depths) require(n <= (1 << 20), "depth", n, "must be <= 1048576");
  for (int n : a.bench.threads) require(n <= 256, "threads", n, "must be <= 256");
  a.bench.caches = cache_configs(a.cache);
  const Model model = Model::load(a.model_path, {.repack = !a.no_repack});
  const ModelFacts facts = model_facts(model, a.model_path);
  MilestoneLog milestones("bench");
  // A fill's bar (a line a minute off a terminal), ended before the next milestone line.
  std::unique_ptr<Progress> fill_bar;
  std::string filling;
  auto progress = [&](const std::string& line) {
    fill_bar.reset();
    filling.clear();
    milestones(line);
  };
  auto fill_progress = [&](const std::string& what, int64_t fed, int64_t depth) {
    if (what != filling) {
      fill_bar = std::make_unique<Progress>("bench: " + what);
      filling = what;
    }
    (*fill_bar)(int(fed), int(depth));  // depth <= 2^20, checked above
  };
  a.bench.bandwidth_bytes = size_t(a.bandwidth_mib) << 20;
  const BenchReport report = run_bench(model, a.bench, progress, fill_progress);
  const std::vector<BenchRow>& rows = report.rows;
  const uint64_t peak_rss = report.peak_rss_bytes;  // before the probe's buffer
  const std::vector<BandwidthResult>& bandwidth = report.bandwidth;
  if (a.output == "md") print_md(facts, bandwidth, rows, peak_rss);
  if (a.output == "md" && a.bench.profile) print_profile_md(rows);
  if (a.output == "csv") print_csv(facts, rows);
  if (a.output == "json") print_json(facts, bandwidth, rows, peak_rss);
}

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "prompt and generation speed, like llama-bench, with any cache");
  BenchOptions& b = args->bench;
  cmd->add_option("-m,--model", args->model_path, "GGUF model file")->required();
  add_repack_flag(*cmd, args->no_repack);
  cmd->add_option("-p,--n-prompt", b.n_prompt, "prompt tokens per pp test (comma list; 0 = none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", b.n_gen, "generated tokens per tg test (comma list; 0 = none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", b.repetitions, "repetitions of each test")->capture_default_str();
  cmd->add_option("-t,--threads", b.threads, "thread counts (comma list)")->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--depth", b.depths, "context depths filled (untimed) before the tests (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", b.n_batch, "prompt tokens per forward call")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "output format: md, csv or json")->capture_default_str();
  cmd->add_option("--bandwidth-mib", args->bandwidth_mib,
                  "memory-bandwidth probe buffer in MiB, read after every generation repetition (0 = no probe)")
      ->capture_default_str();
  cmd->add_option("--seed", b.seed, "seed of the token ids fed in")->capture_default_str();
  cmd->add_flag("--profile", b.profile,
                "also time each pass by operation (projections, attention, cache, norms, logits): a table of ms "
                "per token in md, op_ms_per_token in json");
  // The engine feeds real attention back, so bench scores rows as generate does (docs/notes/).
  // Set before the options are added, so that --help shows these defaults.
  args->cache.command_defaults = {{"method", "full"}, {"score", "attention"}};
  add_cache_options(*cmd, args->cache);
  cmd->footer(
      "--method, --score, --positions and --kv-type take comma lists (--method window,squeeze,full,\n"
      "--kv-type f16,q8_0): every combination is one row, measured side by side (repetitions outer,\n"
      "configurations inner; generation token by token).\n"
      "'time vs 1st cache' is each row's time over the first configuration's at the same depth,\n"
      "paired within every repetition: the figure to quote when comparing caches.");
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kBenchCommand{"bench", 70, add_bench_command};

}  // namespace
}  // namespace squeezekv::cli
