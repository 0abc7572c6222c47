// The cache options every subcommand that builds a cache accepts, declared once.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "squeezekv/core/kv_cache_config.h"

namespace squeezekv::cli {

struct CacheOptions {
  KVCacheConfig config;
  std::string score = "key-proxy";
  std::string kv_type = "f16";
  std::string positions = "cache";
  std::string importance = "key-dispersion";
  bool has_budget_list = false;  // the caller declares --budget itself (e.g. synth's grid)

  // Resolves the text options into `config` and validates it (InvalidArgument on bad values).
  KVCacheConfig resolve() const;
};

// Adds --method --policy --allocator [--budget] --sinks --strength --recent --decay --score
// --kv-type --positions --beta --chunk-size --window --kernel --importance --squeeze-fraction.
void add_cache_options(CLI::App& app, CacheOptions& options, bool with_budget = true,
                       bool with_strength = true);

// Exit status for bad input (a bad parameter, file or value).
inline constexpr int kExitBadInput = 2;

}  // namespace squeezekv::cli
