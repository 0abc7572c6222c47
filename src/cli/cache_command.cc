// `squeezekv cache info FILE`: what a saved cache holds (docs/cache_file.md): the model it belongs
// to, its configuration, the tokens it has seen, the rows and bytes per layer. Every check of a
// load runs (the state is loaded into a cache of the saved shapes), so a bad file is refused here.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {
namespace {

struct CacheInfoArgs {
  std::string path;
  bool json = false;
};

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void run_info(const CacheInfoArgs& a) {
  const CacheFileInfo info = read_cache_file_info(a.path);
  const ModelIdentity& m = info.contents.model;
  const KVCacheConfig& config = info.contents.config;
  const ModelCache& cache = *info.cache;
  std::vector<int> rows, budgets = cache.budgets();
  std::vector<size_t> bytes;
  size_t slot_bytes = 0;  // the rows' bookkeeping beside their K/V bytes
  for (int l = 0; l < cache.n_layers(); ++l) {
    rows.push_back(cache.layer(l).rows_per_head());
    bytes.push_back(cache.layer(l).kept_bytes());
    for (const HeadStore& head : cache.layer(l).rows().heads) slot_bytes += head.slot_bytes();
  }
  if (a.json) {
    nlohmann::json params = nlohmann::json::object();
    for (const ParamSpec* spec : all_params()) params[std::string(spec->name)] = config.get_text(spec->name);
    const nlohmann::json out = {{"path", a.path},
                                {"format_version", info.version},
                                {"file_bytes", info.file_bytes},
                                {"model",
                                 {{"architecture", m.arch},
                                  {"name", m.name},
                                  {"layers", m.n_layers},
                                  {"heads", m.n_heads},
                                  {"kv_heads", m.n_kv_heads},
                                  {"head_dim", m.head_dim},
                                  {"vocab", m.vocab},
                                  {"layer_windows", m.layer_windows},
                                  {"tokenizer_hash", hex(m.tokenizer_hash)},
                                  {"weights_hash", hex(m.weights_hash)}}},
                                {"method", cache_label(config)},
                                {"policy", resolved_policy(config)},
                                {"allocator", resolved_allocator(config)},
                                {"k_type", to_string(config.key_type())},
                                {"v_type", to_string(config.value_type())},
                                {"parameters", params},
                                {"tokens", info.contents.tokens.size()},
                                {"layer_budgets", budgets},
                                {"layer_kept", rows},
                                {"layer_bytes", bytes},
                                {"kv_kept_bytes", cache.kept_bytes()},
                                {"kv_full_bytes", cache.full_bytes()},
                                {"slot_bytes", slot_bytes}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("file         %s (format version %u, %.1f KiB)\n", a.path.c_str(), info.version,
              double(info.file_bytes) / 1024.0);
  std::printf("model        %s%s%s: %d layers, %d heads, %d KV heads, head_dim %d, vocab %d\n", m.arch.c_str(),
              m.name.empty() ? "" : " ", m.name.c_str(), m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.vocab);
  std::printf("             tokenizer %s, weights %s\n", hex(m.tokenizer_hash).c_str(), hex(m.weights_hash).c_str());
  std::printf("cache        %s, budget %d, K %s, V %s, positions %s\n", cache_label(config).c_str(), config.budget,
              to_string(config.key_type()).c_str(), to_string(config.value_type()).c_str(),
              to_string(config.positions).c_str());
  std::printf("tokens       %zu seen\n", info.contents.tokens.size());
  std::string kept;
  for (size_t l = 0; l < rows.size(); ++l) kept += (l ? " " : "") + std::to_string(rows[l]);
  std::printf("rows/layer   %s\n", kept.c_str());
  std::printf("KV resident  %.1f KiB (a full cache %.1f KiB, %.2fx); rows' scores, positions, shifts %.1f KiB\n",
              double(cache.kept_bytes()) / 1024.0, double(cache.full_bytes()) / 1024.0, cache.compression_ratio(),
              double(slot_bytes) / 1024.0);
}

void add_cache_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "saved caches (--save-cache): cache info FILE");
  cmd->require_subcommand(1);
  auto args = std::make_shared<CacheInfoArgs>();
  auto* info = cmd->add_subcommand("info", "what a cache file holds: model, method, rows per layer, bytes, tokens");
  info->add_option("file", args->path, "the cache file")->required();
  info->add_flag("--json", args->json, "print one JSON object");
  info->callback([args] { run_info(*args); });
}

const CommandRegistration kCacheCommand{"cache", 120, add_cache_command};

}  // namespace
}  // namespace squeezekv::cli
