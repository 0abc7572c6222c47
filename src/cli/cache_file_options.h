// --save-cache and --load-cache (engine/cache_file.h) for the commands that run one cache
// (generate, needle, perplexity): the options, the cache to start from and the tokens to feed.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/cache_options.h"
#include "squeezekv/engine/engine.h"

namespace squeezekv::cli {

struct CacheFileOptions {
  std::string save_path;           // --save-cache
  std::string save_after = "end";  // --save-after: prompt | end
  std::string load_path;           // --load-cache
  bool saves() const { return !save_path.empty(); }
  bool loads() const { return !load_path.empty(); }
  bool saves_after_prompt() const { return saves() && save_after == "prompt"; }
};

void add_cache_file_options(CLI::App& app, CacheFileOptions& options, bool save_after = true);

// Before the model is loaded: a --save-cache path that cannot be written is refused now.
void check_cache_file_options(const CacheFileOptions& options);

// The cache a command starts from: --load-cache's, whose configuration the cache options given on
// the command line must not contradict (InvalidArgument naming the option, the file and the
// file's value), or a new one of `config`. `history` holds the tokens it has seen.
struct StartingCache {
  std::unique_ptr<ModelCache> cache;
  std::vector<int32_t> history;
  KVCacheConfig config;
};
StartingCache starting_cache(const CacheFileOptions& files, const CacheOptions& given, const KVCacheConfig& config,
                             const Engine& engine);

// The tokens to feed a loaded cache: `with_special` (the text encoded as a whole prompt, BOS
// included) past the history when it begins with it, else `plain` (the text encoded as a
// continuation). InvalidArgument when nothing is left to feed.
std::vector<int32_t> continuation(const CacheFileOptions& files, const std::vector<int32_t>& history,
                                  const std::vector<int32_t>& with_special, const std::vector<int32_t>& plain);

// Writes --save-cache's file: `tokens` are every token the cache has seen.
void save_cache(const CacheFileOptions& files, const Engine& engine, const ModelCache& cache,
                const std::vector<int32_t>& tokens);

}  // namespace squeezekv::cli
