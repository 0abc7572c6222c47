// Perplexity of a text that continues what a cache holds (a loaded cache file, engine/cache_file.h):
// `perplexity --load-cache`. The text goes in as updates of n_batch tokens after the cache's own
// tokens, each update's logits for all its tokens; every token after the first is scored from the
// logits of the one before (the first has no logits in the file to be scored from). A cache saved
// and loaded gives the perplexity the cache that was never saved gives, bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "squeezekv/engine/engine.h"

namespace squeezekv {

struct ContinuationResult {
  int64_t tokens = 0;  // fed
  int64_t scored = 0;  // tokens - 1
  double mean_nll = 0.0, perplexity = 0.0;
  double peak_kept_bytes = 0.0;  // after each update
  double seconds = 0.0;
};

// InvalidArgument when tokens holds fewer than 2 or n_batch < 1.
ContinuationResult continuation_perplexity(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens,
                                           int n_batch);

}  // namespace squeezekv
