#include "cli/cache_file_options.h"

#include <cstdio>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {

void add_cache_file_options(CLI::App& app, CacheFileOptions& options, bool save_after) {
  app.add_option("--save-cache", options.save_path,
                 "write the cache to this file (docs/cache_file.md) for a later --load-cache");
  if (save_after) {
    app.add_option("--save-after", options.save_after,
                   "when --save-cache writes: after the prompt, or at the end (the output fed too)")
        ->capture_default_str()
        ->check(CLI::IsMember({"prompt", "end"}));
  }
  app.add_option("--load-cache", options.load_path,
                 "continue the cache saved in this file: the text given is what follows the tokens it holds "
                 "(or begins with them); its configuration is the file's");
}

void check_cache_file_options(const CacheFileOptions& options) {
  if (options.saves()) {
    try {
      check_cache_file_writable(options.save_path);
    } catch (const Error& e) {
      throw InvalidArgument("--save-cache = " + options.save_path + ": " + e.what());
    }
  }
}

StartingCache starting_cache(const CacheFileOptions& files, const CacheOptions& given, const KVCacheConfig& config,
                             const Engine& engine) {
  StartingCache out;
  if (!files.loads()) {
    out.cache = engine.make_cache(config);
    out.config = config;
    return out;
  }
  LoadedCache loaded = load_cache_file(files.load_path, engine.model());
  out.config = loaded.contents.config;
  // An option given on the command line must agree with the file's configuration.
  for (const auto& [name, option] : given.options) {
    if (option->count() == 0) continue;
    KVCacheConfig asked = out.config;
    asked.set(name, given.text(name));
    if (!(asked == out.config)) {
      throw InvalidArgument(invalid_value(option->get_name(), given.text(name),
                                          "--load-cache " + files.load_path + " holds a cache with " + name + " = " +
                                              out.config.get_text(name) + ", which it continues"));
    }
  }
  out.cache = std::move(loaded.cache);
  out.history = std::move(loaded.contents.tokens);
  return out;
}

std::vector<int32_t> continuation(const CacheFileOptions& files, const std::vector<int32_t>& history,
                                  const std::vector<int32_t>& with_special, const std::vector<int32_t>& plain) {
  const std::vector<int32_t> rest = continuation_tokens(history, with_special, plain);
  require(!rest.empty(), "--load-cache", files.load_path,
          "the text given adds no token to the " + std::to_string(history.size()) +
              " tokens the file holds (give the text that follows them)");
  return rest;
}

void save_cache(const CacheFileOptions& files, const Engine& engine, const ModelCache& cache,
                const std::vector<int32_t>& tokens) {
  const uint64_t bytes = save_cache_file(files.save_path, engine.model(), cache, tokens);
  std::fprintf(stderr, "saved the cache (%zu tokens, %.1f KiB resident) to %s (%.1f KiB)\n", tokens.size(),
               double(cache.kept_bytes()) / 1024.0, files.save_path.c_str(), double(bytes) / 1024.0);
}

}  // namespace squeezekv::cli
