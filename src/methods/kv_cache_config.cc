#include "squeezekv/methods/kv_cache_config.h"

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kivi_rows.h"

namespace squeezekv {
namespace {

// Row counts stay below 2^30 so that budget arithmetic (sums over layers, budget + chunk) never
// overflows an int.
constexpr double kMaxRows = double(1 << 30) - 1;
constexpr std::string_view kScores[] = {"key-proxy", "attention"};
constexpr std::span<const std::string_view> kKVTypes = kKVTypeNames;  // every K/V format (ops/kv_format.h)
constexpr auto kPartTypes = [] {
  std::array<std::string_view, kKVTypeNames.size() + 1> names{"auto"};
  std::copy(kKVTypeNames.begin(), kKVTypeNames.end(), names.begin() + 1);
  return names;
}();
constexpr std::string_view kOnOff[] = {"auto", "off", "on"};
constexpr std::string_view kHeadSplits[] = {"auto", "uniform", "adakv"};

void multiple_of_8(const ParamSpec& spec, const ParamValue& value) {
  const int64_t v = std::get<int64_t>(value);
  require(v % 8 == 0, spec.name, v, "must be a multiple of 8 (whole bytes of 2- and 4-bit codes)");
}
// The component fields name registered components (or nothing, for the overrides), checked when
// set so that every caller (C's squeezekv_cache_params_set included) hears of a bad id at once.
void known_method(const ParamSpec&, const ParamValue& value) { find_method(std::get<std::string>(value)); }
void known_policy(const ParamSpec&, const ParamValue& value) {
  if (!std::get<std::string>(value).empty()) find_policy(std::get<std::string>(value));
}
void known_allocator(const ParamSpec&, const ParamValue& value) {
  if (!std::get<std::string>(value).empty()) find_allocator(std::get<std::string>(value));
}
constexpr std::string_view kPositionRules[] = {"span", "cache", "text"};

using Value = ParamValue;
using Config = KVCacheConfig;

int64_t as_int(const Value& v) { return std::get<int64_t>(v); }
double as_real(const Value& v) { return std::get<double>(v); }
const std::string& as_text(const Value& v) { return std::get<std::string>(v); }

// One of the cache's own fields: its spec, and how it is read and written (set receives a value
// already checked against the spec, integers widened where a real is expected).
struct Field {
  ParamSpec spec;
  Value (*get)(const Config&);
  void (*set)(Config&, const Value&);
};

// In the order interfaces list them (a sweep label shows score, recent, decay and sinks so).
const Field kFields[] = {
    {{"method",
      ParamKind::text,
      "squeeze",
      "eviction method id (see `squeezekv methods`)",
      0,
      0,
      false,
      {},
      {},
      true,
      false,
      known_method},
     [](const Config& c) -> Value { return c.method; },
     [](Config& c, const Value& v) { c.method = as_text(v); }},
    {{"policy",
      ParamKind::text,
      "",
      "override the method's token policy",
      0,
      0,
      false,
      {},
      {},
      true,
      false,
      known_policy},
     [](const Config& c) -> Value { return c.policy; },
     [](Config& c, const Value& v) { c.policy = as_text(v); }},
    {{"allocator",
      ParamKind::text,
      "",
      "override the method's layer allocator",
      0,
      0,
      false,
      {},
      {},
      true,
      false,
      known_allocator},
     [](const Config& c) -> Value { return c.allocator; },
     [](Config& c, const Value& v) { c.allocator = as_text(v); }},
    {{"head_split",
      ParamKind::choice,
      "auto",
      "how a layer's rows are shared among its KV heads: uniform (each its budget) or adakv (the layer's "
      "best rows over all heads, a floor each; auto: the method's)",
      0,
      0,
      false,
      kHeadSplits,
      {},
      true,
      false,
      {},
      /*label=*/"head_split",
      /*omit_if=*/"auto"},
     [](const Config& c) -> Value { return c.head_split; },
     [](Config& c, const Value& v) { c.head_split = as_text(v); }},
    {{"head_floor",
      ParamKind::real,
      "0.2",
      "head_split adakv: share of the layer's budget every head keeps at least (1 = the uniform split)",
      0,
      1,
      false,
      {},
      {},
      true,
      false,
      {},
      /*label=*/"floor",
      /*omit_if=*/"0.2"},
     [](const Config& c) -> Value { return c.head_floor; },
     [](Config& c, const Value& v) { c.head_floor = as_real(v); }},
    {{"head_dim",
      ParamKind::integer,
      "128",
      "dimension of every key and value row",
      1,
      65536,
      false,
      {},
      {},
      /*on_command_line=*/false},
     [](const Config& c) -> Value { return int64_t(c.head_dim); },
     [](Config& c, const Value& v) { c.head_dim = int(as_int(v)); }},
    {{"budget", ParamKind::integer, "512", "average rows kept per layer and KV head", 1, kMaxRows},
     [](const Config& c) -> Value { return int64_t(c.budget); },
     [](Config& c, const Value& v) { c.budget = int(as_int(v)); }},
    {{"resolved_budget",
      ParamKind::integer,
      "none",
      "explicit budget of a lone layer cache",
      1,
      kMaxRows,
      false,
      {},
      {},
      /*on_command_line=*/false,
      /*optional=*/true},
     [](const Config& c) -> Value {
       return c.resolved_budget ? Value(int64_t(*c.resolved_budget)) : Value(std::string("none"));
     },
     [](Config& c, const Value& v) {
       if (std::holds_alternative<int64_t>(v)) c.resolved_budget = int(as_int(v));
       else c.resolved_budget.reset();  // "none"
     }},
    {{"score",
      ParamKind::choice,
      "key-proxy",
      "score source of the policies that score rows",
      0,
      0,
      false,
      kScores,
      {},
      true,
      false,
      {},
      /*label=*/"score"},
     [](const Config& c) -> Value { return to_string(c.score); },
     [](Config& c, const Value& v) { c.score = parse_score_source(as_text(v)); }},
    {{"recent",
      ParamKind::real,
      "0.5",
      "share of (budget - sinks) kept as the newest rows",
      0,
      1,
      false,
      {},
      {},
      true,
      false,
      {},
      /*label=*/"recent"},
     [](const Config& c) -> Value { return c.recent; },
     [](Config& c, const Value& v) { c.recent = as_real(v); }},
    {{"decay",
      ParamKind::real,
      "0.98",
      "score decay per token; 1 = off",
      0,
      1,
      /*min_open=*/true,
      {},
      {},
      true,
      false,
      {},
      /*label=*/"decay",
      /*omit_if=*/"1"},
     [](const Config& c) -> Value { return c.decay; },
     [](Config& c, const Value& v) { c.decay = as_real(v); }},
    {{"n_sink",
      ParamKind::integer,
      "4",
      "first positions never evicted (attention sinks)",
      0,
      kMaxRows,
      false,
      {},
      "sinks",
      true,
      false,
      {},
      /*label=*/"sinks"},
     [](const Config& c) -> Value { return int64_t(c.n_sink); },
     [](Config& c, const Value& v) { c.n_sink = int(as_int(v)); }},
    {{"kv_type",
      ParamKind::choice,
      "f16",
      "stored K/V format (`squeezekv methods` lists each with its bits per value)",
      0,
      0,
      false,
      kKVTypes,
      {},
      true,
      false,
      {},
      /*label=*/"kv",
      /*omit_if=*/"f16"},
     [](const Config& c) -> Value { return to_string(c.kv_type); },
     [](Config& c, const Value& v) { c.kv_type = parse_kv_type(as_text(v)); }},
    {{"k_type",
      ParamKind::choice,
      "auto",
      "stored key format (auto: as kv_type)",
      0,
      0,
      false,
      kPartTypes,
      {},
      true,
      false,
      {},
      /*label=*/"k",
      /*omit_if=*/"auto"},
     [](const Config& c) -> Value { return c.k_type ? to_string(*c.k_type) : std::string("auto"); },
     [](Config& c, const Value& v) {
       if (as_text(v) == "auto") c.k_type.reset();
       else c.k_type = parse_kv_type(as_text(v));
     }},
    {{"v_type",
      ParamKind::choice,
      "auto",
      "stored value format (auto: as kv_type)",
      0,
      0,
      false,
      kPartTypes,
      {},
      true,
      false,
      {},
      /*label=*/"v",
      /*omit_if=*/"auto"},
     [](const Config& c) -> Value { return c.v_type ? to_string(*c.v_type) : std::string("auto"); },
     [](Config& c, const Value& v) {
       if (as_text(v) == "auto") c.v_type.reset();
       else c.v_type = parse_kv_type(as_text(v));
     }},
    {{"kivi_group",
      ParamKind::integer,
      "32",
      "KIVI: tokens per key group (per channel) and channels per value group (the whole row when head_dim "
      "is smaller); a multiple of 8",
      8,
      1024,
      false,
      {},
      {},
      true,
      false,
      multiple_of_8,
      /*label=*/"group",
      /*omit_if=*/"32"},
     [](const Config& c) -> Value { return int64_t(c.kivi_group); },
     [](Config& c, const Value& v) { c.kivi_group = int(as_int(v)); }},
    {{"kivi_residual",
      ParamKind::integer,
      "128",
      "KIVI: newest rows kept in fp16 (a multiple of kivi_group; keys are quantized a group at a time once "
      "that many wait)",
      0,
      1 << 20,
      false,
      {},
      {},
      true,
      false,
      {},
      /*label=*/"residual",
      /*omit_if=*/"128"},
     [](const Config& c) -> Value { return int64_t(c.kivi_residual); },
     [](Config& c, const Value& v) { c.kivi_residual = int(as_int(v)); }},
    {{"kivi_fp16_sinks",
      ParamKind::choice,
      "auto",
      "KIVI: keep the first n_sink positions in fp16 (auto: on for method kivi_sink)",
      0,
      0,
      false,
      kOnOff,
      {},
      true,
      false,
      {},
      /*label=*/"fp16-sinks",
      /*omit_if=*/"auto"},
     [](const Config& c) -> Value { return c.kivi_fp16_sinks; },
     [](Config& c, const Value& v) { c.kivi_fp16_sinks = as_text(v); }},
    {{"positions",
      ParamKind::choice,
      "span",
      "RoPE positions: span (its place in the text, rows kept within max_distance, sinks read at that "
      "distance), cache (a row's rank among the rows held) or text (its place in the text)",
      0,
      0,
      false,
      kPositionRules,
      {},
      true,
      false,
      {},
      /*label=*/"pos",
      /*omit_if=*/"span"},
     [](const Config& c) -> Value { return to_string(c.positions); },
     [](Config& c, const Value& v) { c.positions = parse_position_rule(as_text(v)); }},
    {{"max_distance",
      ParamKind::integer,
      "0",
      "positions span: the farthest query-to-key distance (0 = the model's context length - 1)",
      0,
      kMaxRows,
      false,
      {},
      {},
      true,
      false,
      {},
      /*label=*/"max-dist",
      /*omit_if=*/"0"},
     [](const Config& c) -> Value { return c.max_distance; },
     [](Config& c, const Value& v) { c.max_distance = as_int(v); }},
};

const Field* find_field(std::string_view name) {
  for (const Field& f : kFields) {
    if (f.spec.name == name) return &f;
  }
  return nullptr;
}

}  // namespace

std::span<const ParamSpec> cache_params() {
  // The specs alone, contiguous for the registry's walks; built once (thread-safe static).
  static const std::vector<ParamSpec> specs = [] {
    std::vector<ParamSpec> out;
    for (const Field& f : kFields) out.push_back(f.spec);
    return out;
  }();
  return specs;
}

void KVCacheConfig::set(std::string_view name, std::string_view text) { set(name, require_param(name).parse(text)); }

void KVCacheConfig::set(std::string_view name, const ParamValue& value) {
  const ParamSpec& spec = require_param(name);
  // Integers given where a real is expected are widened; the range check comes before narrowing.
  ParamValue v = value;
  if (spec.kind == ParamKind::real) {
    if (const auto* i = std::get_if<int64_t>(&value)) v = double(*i);
  }
  spec.check(v);
  if (const Field* field = find_field(name)) field->set(*this, v);
  else params.insert_or_assign(std::string(name), std::move(v));
}

ParamValue KVCacheConfig::get(std::string_view name) const {
  const ParamSpec& spec = require_param(name);
  if (const Field* field = find_field(name)) return field->get(*this);
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
  require(p.keeps_every_row == a.unbounded, "allocator", a.id,
          "policy " + std::string(p.id) +
              (p.keeps_every_row ? " keeps every row and takes an unbounded allocator (none)"
                                 : " evicts and needs a budget allocator (uniform, pyramid, squeeze)"));
  if (head_split_rule(*this) == HeadSplitRule::adakv) {
    std::string able;
    for (const PolicyInfo* q : all_policies()) {
      if (q->splits_heads) able += (able.empty() ? "" : ", ") + std::string(q->id);
    }
    require(p.splits_heads, "head_split", "adakv",
            "policy " + std::string(p.id) + " has no row scores to split a layer's rows by (policies that do: " + able +
                ")");
  }
  if (a.ranks_globally) {
    std::string able;
    for (const PolicyInfo* q : all_policies()) {
      if (q->ranks_across_layers) able += (able.empty() ? "" : ", ") + std::string(q->id);
    }
    require(p.ranks_across_layers, "allocator", a.id,
            "ranks every layer's rows together, and the scores of policy " + std::string(p.id) +
                " do not mean the same across layers (policies whose scores do: " + able + ")");
  }
  // The fields every cache has: their ranges, then the rules between them.
  for (const Field& f : kFields) {
    const ParamSpec& spec = f.spec;
    if (spec.kind == ParamKind::text) continue;
    spec.check(get(spec.name));
  }
  const MethodInfo& m = find_method(method);
  if (!m.kv_type.empty()) {
    require(kv_type == KVType::f16 || kv_kivi(kv_type), "kv_type", to_string(kv_type),
            "method " + std::string(m.id) + " stores KIVI codes: kivi2 or kivi4 (f16, the default, gives " +
                std::string(m.kv_type) + ")");
  }
  // The storage of the keys and of the values checks its formats and parameters at this head_dim.
  if (const std::string unfit = storage_unfit(storage_params(*this)); !unfit.empty()) throw InvalidArgument(unfit);
  if (!p.keeps_every_row) {
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
    require(find_field(name) == nullptr, name, format_value(value), "is a field, not a component parameter");
    require_param(name).check(value);
  }
  if (p.validate) p.validate(component_params(*this, p.params));
  if (a.validate) a.validate(component_params(*this, a.params));
  // A storage that would compress nothing at this budget (KIVI's residual over half of it) is
  // refused here, so that every command, the server, C and Python refuse it alike.
  if (const std::string unfit = storage_budget_unfit(*this); !unfit.empty()) throw InvalidArgument(unfit);
}

namespace {

// kv_type, or the method's storage preset when kv_type is left at f16.
KVType storage_default(const KVCacheConfig& c) {
  if (c.kv_type == KVType::f16) {
    if (const MethodInfo* m = method_or_null(c.method); m && !m->kv_type.empty()) {
      return parse_kv_type(std::string(m->kv_type));
    }
  }
  return c.kv_type;
}

}  // namespace

KVType KVCacheConfig::key_type() const { return k_type ? *k_type : storage_default(*this); }
KVType KVCacheConfig::value_type() const { return v_type ? *v_type : storage_default(*this); }

size_t kv_token_bytes(const KVCacheConfig& config) { return token_bytes(storage_params(config)); }

int KVCacheConfig::kivi_sinks() const {
  if (kivi_fp16_sinks == "on") return n_sink;
  if (kivi_fp16_sinks == "off") return 0;
  const MethodInfo* m = method_or_null(method);
  return m && m->fp16_sinks ? n_sink : 0;
}

std::string to_string(HeadSplitRule rule) { return rule == HeadSplitRule::adakv ? "adakv" : "uniform"; }

std::string to_string(ScoreSource source) { return source == ScoreSource::key_proxy ? "key-proxy" : "attention"; }

std::string to_string(KVType type) { return size_t(type) < kKVFormatCount ? std::string(kv_format(type).name) : "?"; }

std::string to_string(PositionRule rule) {
  switch (rule) {
    case PositionRule::cache:
      return "cache";
    case PositionRule::span:
      return "span";
    case PositionRule::text:
      break;
  }
  return "text";
}

ScoreSource parse_score_source(const std::string& text) {
  if (text == "key-proxy") return ScoreSource::key_proxy;
  if (text == "attention") return ScoreSource::attention;
  throw InvalidArgument(invalid_value("score", text, "expected key-proxy or attention"));
}

PositionRule parse_position_rule(const std::string& text) {
  if (text == "cache") return PositionRule::cache;
  if (text == "text") return PositionRule::text;
  if (text == "span") return PositionRule::span;
  throw InvalidArgument(invalid_value("positions", text, "expected cache, span or text"));
}

KVType parse_kv_type(const std::string& text) {
  if (const std::optional<KVType> type = find_kv_type(text)) return *type;
  throw InvalidArgument(invalid_value("kv_type", text, "expected " + kv_type_names_text()));
}

}  // namespace squeezekv
