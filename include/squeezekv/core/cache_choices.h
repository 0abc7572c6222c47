// The enumerated choices of a cache that components below the registry read: where scores come
// from and which positions RoPE sees. Their names and parsing live with KVCacheConfig
// (methods/kv_cache_config.h).
#pragma once

#include <cstdint>

namespace squeezekv {

// Where the cumulative-score policies get their per-row importance.
enum class ScoreSource : uint8_t {
  key_proxy,  // each new key acts as the query (needs only K/V; the reference library's)
  attention,  // real attention probabilities fed back by the engine (original H2O)
};

// Which position RoPE gives a query and a kept row (docs/positions.md).
enum class PositionRule : uint8_t {
  span,   // the position in the text, rows kept within max_distance of the newest token (sinks
          // excepted: they are read at that distance)
  cache,  // the rank among the rows the layer-head holds: distances never exceed the rows held
  text,   // the position in the original text
};

// How a layer's rows are shared among its KV heads (alloc/head_split.h).
enum class HeadSplitRule : uint8_t {
  uniform,  // every head holds the layer's budget
  adakv,    // Ada-KV: the layer's best H x budget rows over all heads, a floor per head
};

}  // namespace squeezekv
