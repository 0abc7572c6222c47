// KVCacheConfig: the configuration of one cache. The fields every cache has (the method id and the
// reference library's names: head_dim, budget, n_sink, resolved_budget; plus the recent window,
// decay, score source and K/V type) are members; the parameters of one token policy or one layer
// allocator (chunk_size, beta, strength, ...) live in a typed map, described and validated by the
// component that owns them (methods/registry.h). get/set by name reach both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "squeezekv/core/cache_choices.h"
#include "squeezekv/core/param_spec.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

struct KVCacheConfig {
  std::string method = "squeeze";        // a registered method id (`squeezekv methods`)
  int head_dim = 128;                    // must match every update's keys and values
  int budget = 512;                      // average rows per layer and KV head (squeeze_budget)
  int n_sink = 4;                        // first positions never evicted; floor is n_sink + 1
  std::optional<int> resolved_budget{};  // explicit per-layer budget for a lone cache
  // Defaults chosen from measurements (docs/notes/): without a recent window the cumulative
  // score freezes on the prompt; a slow decay lets scores follow the text.
  double recent = 0.5;  // share of (budget - n_sink) kept as the newest rows
  double decay = 0.98;  // scores = decay * scores + a; in (0, 1], 1 = off
  ScoreSource score = ScoreSource::key_proxy;
  KVType kv_type = KVType::f16;    // keys and values, unless k_type / v_type say otherwise
  std::optional<KVType> k_type{};  // unset ("auto"): kv_type
  std::optional<KVType> v_type{};
  // The stored formats: k_type / v_type when set, else kv_type; a method with a storage preset
  // (kivi, kivi_sink: kivi2) gives it when kv_type is left at f16.
  KVType key_type() const;
  KVType value_type() const;
  // KIVI storage (kv_type kivi2 / kivi4, docs/semantics.md "K/V storage"): keys are quantized per
  // channel in groups of kivi_group tokens, values per token in groups of kivi_group channels (the
  // whole row when head_dim is smaller); the newest kivi_residual rows stay fp16.
  int kivi_group = 32;
  int kivi_residual = 128;
  // "auto" (on for method kivi_sink), "on" (the first n_sink positions stay fp16) or "off".
  std::string kivi_fp16_sinks = "auto";
  // Positions below this stay fp16 in a KIVI cache (n_sink when kivi_fp16_sinks resolves on).
  int kivi_sinks() const;
  PositionRule positions = PositionRule::span;
  // PositionRule::span: the largest query-to-key distance RoPE sees. The cache evicts every
  // non-sink row farther back than this; the engine reads sinks at this distance. 0 = the model's
  // context length - 1 (Engine::make_cache resolves it; a cache built without an engine and
  // max_distance 0 does not age rows).
  int64_t max_distance = 0;

  // The method's preset pair can be overridden: any policy with any allocator.
  std::string policy{};     // "" = the method's token policy
  std::string allocator{};  // "" = the method's layer allocator
  // How a layer's rows are shared among its KV heads: "auto" (the method's split, uniform unless
  // it names one), "uniform" (every head the layer's budget) or "adakv" (Ada-KV: the layer's top
  // heads x budget rows by the policy's scores, each head keeping at least ceil(head_floor x
  // budget)); alloc/head_split.h.
  std::string head_split = "auto";
  double head_floor = 0.2;

  // Component parameters set explicitly (by name); the rest read their registered defaults.
  std::map<std::string, ParamValue, std::less<>> params{};

  // By name, for every registered parameter (fields and component parameters alike). set checks
  // the value against the parameter's range and throws InvalidArgument naming it.
  void set(std::string_view name, std::string_view text);
  void set(std::string_view name, const std::string& text) { set(name, std::string_view(text)); }
  void set(std::string_view name, const char* text) { set(name, std::string_view(text)); }
  void set(std::string_view name, const ParamValue& value);
  void set(std::string_view name, double value) { set(name, ParamValue(value)); }
  template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) void set(std::string_view name, T value) {
    set(name, ParamValue(int64_t(value)));
  }
  ParamValue get(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_real(std::string_view name) const;
  std::string get_text(std::string_view name) const;  // any kind, formatted

  // Throws InvalidArgument naming the first bad field and its value: the cache's own fields, then
  // each component's parameters and rules (registry.h).
  void validate() const;

  // Field by field, parameters included: the server continues a kept cache only under the same
  // configuration.
  bool operator==(const KVCacheConfig&) const = default;
};

// Bytes one token takes in one KV head (key and value) in the config's formats; KIVI: its codes
// with their share of the group's min and scale (kivi_rows.h), the fp16 residual not counted.
size_t kv_token_bytes(const KVCacheConfig& config);

std::string to_string(ScoreSource source);
std::string to_string(HeadSplitRule rule);
std::string to_string(KVType type);
std::string to_string(PositionRule rule);
ScoreSource parse_score_source(const std::string& text);    // "key-proxy" | "attention"
KVType parse_kv_type(const std::string& text);              // "f16" | "f32" | "q8_0" | "q4_0" | "kivi2" | "kivi4"
PositionRule parse_position_rule(const std::string& text);  // "span" | "cache" | "text"

}  // namespace squeezekv
