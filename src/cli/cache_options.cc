#include "cli/cache_options.h"

#include <algorithm>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv::cli {
namespace {

std::string owner_note(std::string_view name) {
  std::string note;
  for (const std::string& owner : param_owners(name)) {
    if (owner == "cache") continue;
    note += note.empty() ? " [" : ", ";
    note += owner;
  }
  return note.empty() ? note : note + "]";
}

std::string id_list(std::string_view name) {
  std::string out;
  auto add = [&out](std::string_view id) {
    if (!out.empty()) out += ", ";
    out += id;
  };
  if (name == "method")
    for (const MethodInfo& m : all_methods()) add(m.id);
  if (name == "policy")
    for (const PolicyInfo* p : all_policies()) add(p->id);
  if (name == "allocator")
    for (const AllocatorInfo* a : all_allocators()) add(a->id);
  return out;
}

// What --help shows in place of CLI11's TEXT: the kind, or a choice's values.
std::string type_name(const ParamSpec& spec) {
  switch (spec.kind) {
    case ParamKind::integer:
      return "INT";
    case ParamKind::real:
      return "FLOAT";
    case ParamKind::text:
      return "ID";
    case ParamKind::choice:
      break;
  }
  std::string out;
  for (std::string_view c : spec.choices) {
    if (!out.empty()) out += '|';
    out += c;
  }
  return out;
}

}  // namespace

std::string CacheOptions::text(std::string_view name) const {
  if (auto it = given.find(name); it != given.end()) {
    const auto option = options.find(name);
    if (option == options.end() || option->second->count() > 0) return it->second;
  }
  if (auto it = command_defaults.find(name); it != command_defaults.end()) return it->second;
  return std::string(require_param(name).default_value);
}

KVCacheConfig CacheOptions::resolve(const std::map<std::string, std::string, std::less<>>& overrides) const {
  KVCacheConfig c;
  for (const auto& [name, value] : command_defaults) c.set(name, value);
  for (const auto& [name, option] : options) {
    // An override replaces what was given (bench's comma lists are split into overrides).
    if (option->count() > 0 && !overrides.contains(name)) c.set(name, given.at(name));
  }
  for (const auto& [name, value] : overrides) c.set(name, value);
  c.validate();
  return c;
}

void add_cache_options(CLI::App& app, CacheOptions& o, std::initializer_list<std::string_view> exclude) {
  for (const ParamSpec* spec : all_params()) {
    if (!spec->on_command_line) continue;
    if (std::find(exclude.begin(), exclude.end(), spec->name) != exclude.end()) continue;
    const std::string name(spec->name);
    std::string help(spec->help);
    if (spec->kind == ParamKind::text) help += ": " + id_list(name);
    help += owner_note(name);
    const bool field = param_owners(name).front() == "cache" || storage_owning(name) != nullptr;
    auto* option = app.add_option(spec->cli_flag(), o.given[name], help)->group(field ? "Cache" : "Method parameters");
    auto def = o.command_defaults.find(name);
    const std::string default_text = def != o.command_defaults.end() ? def->second : std::string(spec->default_value);
    if (!default_text.empty()) option->default_str(default_text);
    option->type_name(type_name(*spec));
    o.options[name] = option;
  }
}

void require_effective(const CacheOptions& o, const KVCacheConfig& config) {
  const StorageParams storage = storage_params(config);
  const std::string policy = resolved_policy(config), allocator = resolved_allocator(config);
  for (const auto& [name, option] : o.options) {
    if (option->count() == 0) continue;
    const std::string given = require_param(name).cli_flag() + " = " + o.given.at(name);
    if (const StorageInfo* owner = storage_owning(name); owner != nullptr && !storage_in_use(*owner, storage)) {
      std::string formats;
      for (const KVFormat& f : kKVFormats) {
        if (owner->stores(f.type)) formats += (formats.empty() ? "" : " or ") + std::string(f.name);
      }
      throw InvalidArgument(given + ": has no effect with --kv-type " + to_string(config.key_type()) + " (" +
                            std::string(owner->id) + " storage only: --kv-type, --k-type or --v-type " + formats + ")");
    }
    if (name == "max_distance" && (keeps_every_row(config) || config.positions != PositionRule::span)) {
      throw InvalidArgument(given + ": has no effect with " +
                            (keeps_every_row(config) ? "--method " + config.method + " (a full cache evicts nothing)"
                                                     : "--positions " + to_string(config.positions) + " (span only)"));
    }
    const std::vector<std::string> owners = param_owners(name);
    // A field every cache reads, or a storage's (checked above).
    if (owners.empty() || owners.front() == "cache" || storage_owning(name) != nullptr) continue;
    if (std::find(owners.begin(), owners.end(), "policy " + policy) == owners.end() &&
        std::find(owners.begin(), owners.end(), "allocator " + allocator) == owners.end()) {
      throw InvalidArgument(given + ": has no effect with --method " + cache_label(config) + " (read by " +
                            owners.front() + ")");
    }
  }
}

nlohmann::json to_json(const ParamValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return std::get<std::string>(value);
}

std::string cache_label(const KVCacheConfig& config) {
  const MethodInfo& method = find_method(config.method);
  const std::string policy = resolved_policy(config), allocator = resolved_allocator(config);
  if (policy == method.policy && allocator == method.allocator) return config.method;
  return config.method + " (policy " + policy + ", allocator " + allocator + ")";
}

std::string span_note(const KVCacheConfig& config, int64_t context_length) {
  const int64_t distance = span_distance(config, context_length);
  if (distance == 0) return "";
  std::string note = "positions span, max distance " + std::to_string(distance);
  if (config.max_distance == 0) note += " (the model's context length - 1; --max-distance to change)";
  return note;
}

}  // namespace squeezekv::cli
