// The cache options of every subcommand that builds a cache, generated from the registry: one
// option per registered parameter (`--budget`, `--sinks`, `--chunk-size`, ...), its default and
// help from the parameter's spec.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "squeezekv/methods/kv_cache_config.h"

namespace squeezekv::cli {

struct CacheOptions {
  // A command's own defaults where they differ from the library's (e.g. score=attention in the
  // commands that run the engine, which feeds real attention back). Set before add_cache_options.
  std::map<std::string, std::string, std::less<>> command_defaults;
  // The text given for each parameter, by name (filled by CLI11).
  std::map<std::string, std::string, std::less<>> given;
  std::map<std::string, CLI::Option*, std::less<>> options;

  // The text of a parameter as given, or its default here.
  std::string text(std::string_view name) const;
  // The configuration: the command's defaults, then what was given, then `overrides`; validated
  // (InvalidArgument naming the parameter).
  KVCacheConfig resolve(const std::map<std::string, std::string, std::less<>>& overrides = {}) const;
};

// For a command that runs one cache (generate, perplexity, serve): throws InvalidArgument when an
// option given has no effect on `config` (a KIVI option without KIVI storage, --max-distance
// without an evicting span-rule cache, a component parameter its policy and allocator do not
// read), naming both options. (KIVI storage that would compress nothing is KVCacheConfig::validate's.)
void require_effective(const CacheOptions& options, const KVCacheConfig& config);

// Adds one option per registered parameter that the command line exposes, except `exclude`.
void add_cache_options(CLI::App& app, CacheOptions& options, std::initializer_list<std::string_view> exclude = {});

// What runs, for messages: the method id, plus its policy and allocator when --policy or
// --allocator replaced the method's own (e.g. "streaming (policy cumulative, allocator squeeze)").
std::string cache_label(const KVCacheConfig& config);

// "positions span, max distance 2047 (the model's context length - 1; --max-distance to change)"
// for an evicting span-rule cache, so the distance the engine resolves is visible; "" otherwise.
std::string span_note(const KVCacheConfig& config, int64_t context_length);

// A parameter's value in JSON with its own type (numbers stay numbers).
nlohmann::json to_json(const ParamValue& value);

// Exit status for bad input (a bad parameter, file or value).
inline constexpr int kExitBadInput = 2;

}  // namespace squeezekv::cli
