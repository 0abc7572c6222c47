// The one prompt protocol of every command (generate, perplexity, sweep, bench): the cache is
// cleared, a measuring allocator learns the longest sequence it will see, and the prompt goes in
// as one prompt (begin_prompt ... end_prompt) in n_batch chunks. Evicting policies evict after
// every chunk, so a prompt longer than the budget holds at most budget + n_batch rows per head;
// squeeze measures its schedule on the first chunk, snapkv compresses once at end_prompt.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "squeezekv/engine/engine.h"

namespace squeezekv {

struct PrefillOptions {
  int n_batch = 512;            // tokens per forward call
  int64_t max_rows = 0;         // the longest sequence the cache will see; 0 = unknown (a stream)
  bool reset = true;            // clear the cache first (false: continue where it stands)
  bool as_prompt = true;        // one prompt for the policies that act at its end (snapkv)
  Logits logits = Logits::last; // what the last chunk returns (earlier chunks: none)
};

// `after_chunk(tokens_done)` is called after each forward call (resident-memory statistics).
void prefill(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens,
             const PrefillOptions& options, std::vector<float>& logits,
             const std::function<void(int64_t)>& after_chunk = {});

}  // namespace squeezekv
