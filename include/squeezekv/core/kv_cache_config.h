// KVCacheConfig: the seed's configuration surface (method id, head_dim, average budget, sinks,
// strength, resolved budget) plus what squeezekv adds (recent window, decay, score source, K/V
// storage type, the method parameters of the sibling policies and allocators).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

// Where the cumulative-score policies get their per-row importance.
enum class ScoreSource : uint8_t {
  key_proxy,  // each new key acts as the query (needs only K/V; the seed's)
  attention,  // real attention probabilities fed back by the engine (original H2O)
};

// What a data-driven allocator measures per layer during the prompt.
enum class Importance : uint8_t {
  key_dispersion,  // mean pairwise cosine of the layer's keys (the seed's proxy)
  hidden_cosine,   // cosine between the residual stream before and after attention (the paper's)
};

// Which position RoPE gives a query and a kept row (docs/positions.md).
enum class PositionRule : uint8_t {
  cache,  // the rank among the rows the layer-head holds: distances never exceed the rows held
  text,   // the position in the original text
};

struct KVCacheConfig {
  std::string method = "squeeze";  // a registered method id (see method_registry.h)
  int head_dim = 128;              // must match every update's keys and values
  int budget = 512;                // average rows per layer and KV head (squeeze_budget)
  int n_sink = 4;                  // first positions never evicted; floor is n_sink + 1
  double strength = 1.0;           // squeeze: 0 = uniform (== h2o), 1 = full reallocation
  std::optional<int> resolved_budget{};  // explicit per-layer budget for a lone cache
  // Defaults chosen from measurements (docs/results.md): without a recent window the cumulative
  // score freezes on the prompt; a slow decay lets scores follow the text.
  double recent = 0.5;             // share of (budget - n_sink) kept as the newest rows
  double decay = 0.98;             // scores = decay * scores + a; in (0, 1], 1 = off
  ScoreSource score = ScoreSource::key_proxy;
  KVType kv_type = KVType::f16;
  PositionRule positions = PositionRule::cache;

  // The method's preset pair can be overridden: any policy with any allocator.
  std::string policy{};     // "" = the method's token policy
  std::string allocator{};  // "" = the method's layer allocator

  double beta = 2.0;     // pyramidkv: taper steepness, >= 1 (1 = uniform)
  int chunk_size = 8;    // chunkkv: positions per evicted chunk, >= 1 (1 = h2o)
  int window = 32;       // snapkv: observation window (last prompt queries), < budget
  int kernel = 5;        // snapkv: 1-D average-pool width, odd, >= 1
  Importance importance = Importance::key_dispersion;  // squeeze allocator's measurement
  double squeeze_fraction = 0.6;  // hidden-cosine squeeze: budget share of the least important group

  // Throws InvalidArgument naming the first bad field and its value.
  void validate() const;
};

std::string to_string(ScoreSource source);
std::string to_string(Importance importance);
std::string to_string(KVType type);
std::string to_string(PositionRule rule);
ScoreSource parse_score_source(const std::string& text);  // "key-proxy" | "attention"
Importance parse_importance(const std::string& text);     // "key-dispersion" | "hidden-cosine"
KVType parse_kv_type(const std::string& text);            // "f16" | "f32"
PositionRule parse_position_rule(const std::string& text); // "cache" | "text"

}  // namespace squeezekv
