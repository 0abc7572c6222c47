#include "squeezekv/core/kv_cache_config.h"

#include <cmath>
#include <limits>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Row counts stay below 2^30 so that budget arithmetic (sums over layers, budget + chunk) never
// overflows an int.
constexpr double kMaxRows = double(1 << 30) - 1;
constexpr std::string_view kScores[] = {"key-proxy", "attention"};
constexpr std::string_view kKVTypes[] = {"f16", "f32"};
constexpr std::string_view kPositionRules[] = {"cache", "text"};

// The cache's own fields, in the order interfaces list them.
// The cache's own fields, in the order interfaces list them (a sweep label shows score, recent,
// decay and sinks in this order).
const ParamSpec kCacheParams[] = {
    {"method", ParamKind::text, "squeeze", "eviction method id (see `squeezekv methods`)"},
    {"policy", ParamKind::text, "", "override the method's token policy"},
    {"allocator", ParamKind::text, "", "override the method's layer allocator"},
    {"head_dim", ParamKind::integer, "128", "dimension of every key and value row", 1, 65536, false,
     {}, {}, /*on_command_line=*/false},
    {"budget", ParamKind::integer, "512", "average rows kept per layer and KV head", 1, kMaxRows},
    {"resolved_budget", ParamKind::integer, "none", "explicit budget of a lone layer cache", 1, kMaxRows,
     false, {}, {}, /*on_command_line=*/false, /*optional=*/true},
    {"score", ParamKind::choice, "key-proxy", "score source of the policies that score rows", 0, 0,
     false, kScores, {}, true, false, {}, /*label=*/"score"},
    {"recent", ParamKind::real, "0.5", "share of (budget - sinks) kept as the newest rows", 0, 1, false,
     {}, {}, true, false, {}, /*label=*/"recent"},
    {"decay", ParamKind::real, "0.98", "score decay per token; 1 = off", 0, 1, /*min_open=*/true, {}, {},
     true, false, {}, /*label=*/"decay", /*omit_if=*/"1"},
    {"n_sink", ParamKind::integer, "4", "first positions never evicted (attention sinks)", 0, kMaxRows,
     false, {}, "sinks", true, false, {}, /*label=*/"sinks"},
    {"kv_type", ParamKind::choice, "f16", "stored K/V type", 0, 0, false, kKVTypes},
    {"positions", ParamKind::choice, "cache",
     "RoPE positions: cache (a row's rank among the rows held) or text (its place in the text)", 0, 0, false,
     kPositionRules, {}, true, false, {}, /*label=*/"text-pos", /*omit_if=*/"cache"},
};

int to_int(const ParamSpec& spec, const ParamValue& value) {
  spec.check(value);
  return int(std::get<int64_t>(value));
}

double to_real(const ParamSpec& spec, const ParamValue& value) {
  spec.check(value);
  if (const auto* i = std::get_if<int64_t>(&value)) return double(*i);
  return std::get<double>(value);
}

bool is_field(std::string_view name) {
  for (const ParamSpec& spec : kCacheParams) {
    if (spec.name == name) return true;
  }
  return false;
}

}  // namespace

std::span<const ParamSpec> cache_params() { return kCacheParams; }

void KVCacheConfig::set(std::string_view name, std::string_view text) {
  const ParamSpec& spec = require_param(name);
  if (spec.optional && (text == "none" || text.empty())) {
    if (name == "resolved_budget") resolved_budget.reset();
    return;
  }
  set(name, spec.parse(text));
}

void KVCacheConfig::set(std::string_view name, const ParamValue& value) {
  const ParamSpec& spec = require_param(name);
  // Integers given where a real is expected are widened; the range check comes before narrowing.
  ParamValue v = value;
  if (spec.kind == ParamKind::real) {
    if (const auto* i = std::get_if<int64_t>(&value)) v = double(*i);
  }
  if (name == "method") method = std::get<std::string>(v);
  else if (name == "policy") policy = std::get<std::string>(v);
  else if (name == "allocator") allocator = std::get<std::string>(v);
  else if (name == "head_dim") head_dim = to_int(spec, v);
  else if (name == "budget") budget = to_int(spec, v);
  else if (name == "n_sink") n_sink = to_int(spec, v);
  else if (name == "resolved_budget") resolved_budget = to_int(spec, v);
  else if (name == "recent") recent = to_real(spec, v);
  else if (name == "decay") decay = to_real(spec, v);
  else if (name == "score") {
    spec.check(v);
    score = parse_score_source(std::get<std::string>(v));
  } else if (name == "kv_type") {
    spec.check(v);
    kv_type = parse_kv_type(std::get<std::string>(v));
  } else if (name == "positions") {
    spec.check(v);
    positions = parse_position_rule(std::get<std::string>(v));
  } else {
    spec.check(v);
    params.insert_or_assign(std::string(name), std::move(v));
  }
}

ParamValue KVCacheConfig::get(std::string_view name) const {
  const ParamSpec& spec = require_param(name);
  if (name == "method") return method;
  if (name == "policy") return policy;
  if (name == "allocator") return allocator;
  if (name == "head_dim") return int64_t(head_dim);
  if (name == "budget") return int64_t(budget);
  if (name == "n_sink") return int64_t(n_sink);
  if (name == "resolved_budget") return resolved_budget ? ParamValue(int64_t(*resolved_budget)) : ParamValue(std::string("none"));
  if (name == "recent") return recent;
  if (name == "decay") return decay;
  if (name == "score") return to_string(score);
  if (name == "kv_type") return to_string(kv_type);
  if (name == "positions") return to_string(positions);
  if (auto it = params.find(name); it != params.end()) return it->second;
  for (const MethodInfo& m : all_methods()) {
    if (m.id != method) continue;
    for (const ParamOverride& o : m.overrides) {
      if (o.name == name) return spec.parse(o.value);
    }
  }
  return spec.default_parsed();
}

int64_t KVCacheConfig::get_int(std::string_view name) const {
  const ParamValue v = get(name);
  require(std::holds_alternative<int64_t>(v), name, format_value(v), "is not an integer parameter");
  return std::get<int64_t>(v);
}

double KVCacheConfig::get_real(std::string_view name) const {
  const ParamValue v = get(name);
  if (const auto* i = std::get_if<int64_t>(&v)) return double(*i);
  require(std::holds_alternative<double>(v), name, format_value(v), "is not a numeric parameter");
  return std::get<double>(v);
}

std::string KVCacheConfig::get_text(std::string_view name) const { return format_value(get(name)); }

void KVCacheConfig::validate() const {
  find_method(method);  // throws for an unknown id
  const PolicyInfo& p = resolved_policy_info(*this);
  const AllocatorInfo& a = resolved_allocator_info(*this);
  require((p.id == "full") == (a.id == "none"), "allocator", a.id,
          "the full policy keeps every row and takes allocator none; every other policy needs a "
          "budget allocator (uniform, pyramid, squeeze)");
  // The fields every cache has: their ranges, then the rules between them.
  for (const ParamSpec& spec : kCacheParams) {
    if (spec.kind == ParamKind::text) continue;
    if (spec.optional && !resolved_budget) continue;
    spec.check(get(spec.name));
  }
  if (p.id != "full") {
    require(budget > n_sink, "budget", budget,
            "must exceed n_sink = " + std::to_string(n_sink) + " (the floor is n_sink + 1)");
  }
  if (resolved_budget) {
    require(*resolved_budget > n_sink, "resolved_budget", *resolved_budget,
            "must exceed n_sink = " + std::to_string(n_sink));
  }
  // Component parameters set by name are range-checked whoever owns them, so that a value is
  // accepted or refused the same way whichever method it is given with.
  for (const auto& [name, value] : params) {
    require(!is_field(name), name, format_value(value), "is a field, not a component parameter");
    require_param(name).check(value);
  }
  if (p.validate) p.validate(*this);
  if (a.validate) a.validate(*this);
}

std::string to_string(ScoreSource source) {
  return source == ScoreSource::key_proxy ? "key-proxy" : "attention";
}

std::string to_string(KVType type) { return type == KVType::f16 ? "f16" : "f32"; }

std::string to_string(PositionRule rule) { return rule == PositionRule::cache ? "cache" : "text"; }

ScoreSource parse_score_source(const std::string& text) {
  if (text == "key-proxy") return ScoreSource::key_proxy;
  if (text == "attention") return ScoreSource::attention;
  throw InvalidArgument(invalid_value("score", text, "expected key-proxy or attention"));
}

PositionRule parse_position_rule(const std::string& text) {
  if (text == "cache") return PositionRule::cache;
  if (text == "text") return PositionRule::text;
  throw InvalidArgument(invalid_value("positions", text, "expected cache or text"));
}

KVType parse_kv_type(const std::string& text) {
  if (text == "f16") return KVType::f16;
  if (text == "f32") return KVType::f32;
  throw InvalidArgument(invalid_value("kv_type", text, "expected f16 or f32"));
}

}  // namespace squeezekv
