// Stream perplexity: the text as one continuous stream, never reset (StreamingLLM's protocol).
// The first `warmup` tokens go in as the prompt (prefill.h, n_batch chunks, eviction between
// chunks); from then on every next-token prediction is scored, one token per decode step,
// through the end of the text. Reported as a whole and per segment of `segment` scored tokens,
// with the cache's resident K/V bytes. No full-cache reference (it would not fit), so no KL.
// Memory stays constant over the stream: nothing per token is kept but the token ids given.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "squeezekv/engine/engine.h"

namespace squeezekv {

struct StreamOptions {
  int warmup = 512;        // tokens fed before scoring starts (>= 1)
  int segment = 4096;      // scored tokens per reported segment (>= 1)
  int n_batch = 512;       // warm-up tokens per forward call
  int64_t max_tokens = 0;  // 0 = the whole text, else its first max_tokens tokens
};

struct StreamSegment {
  int64_t first = 0;  // text position of the segment's first scored token
  int64_t scored = 0;
  double mean_nll = 0.0, perplexity = 0.0;
  double mean_kept_bytes = 0.0, peak_kept_bytes = 0.0;  // after each decode step
};

struct StreamResult {
  KVCacheConfig config;
  int64_t tokens = 0;  // of the stream, warm-up included
  int64_t scored = 0;
  double mean_nll = 0.0, perplexity = 0.0;
  double mean_kept_bytes = 0.0, peak_kept_bytes = 0.0;
  // The kept bytes split (means over the scored steps): sliding layers' windows, evicting layers.
  double mean_sliding_kept_bytes = 0.0, mean_evicting_kept_bytes = 0.0;
  std::vector<int> layer_windows;  // per layer: 0 global (evicting), W sliding
  std::vector<StreamSegment> segments;
  std::vector<int> layer_budgets;   // at the end of the stream (conserved)
  std::vector<int> layer_schedule;  // what the allocator scheduled
  double seconds = 0.0;
};

// One result per configuration, each on its own cache. `progress(done, total)` counts scored
// tokens over all configurations.
std::vector<StreamResult> evaluate_stream_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                                     std::span<const KVCacheConfig> configs,
                                                     const StreamOptions& options,
                                                     const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace squeezekv
