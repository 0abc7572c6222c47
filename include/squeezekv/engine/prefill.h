// The one prompt protocol of every caller: the commands (generate, perplexity, sweep, bench,
// needle) through prefill(), the server step by step through PromptFeed. The cache is cleared, a
// measuring allocator learns the longest sequence it will see, and the prompt goes in as one
// prompt (begin_prompt ... end_prompt) in chunks of at most n_batch tokens; a span-rule cache
// takes its chunks in pieces of at most max_distance + 1 tokens once a row is clamped
// (docs/positions.md). Evicting policies evict after every update, so a prompt longer than the
// budget holds at most budget + n_batch rows per head; squeeze measures its schedule on the first
// update, snapkv compresses once at end_prompt, kvzip after its reconstruction pass.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "squeezekv/engine/engine.h"

namespace squeezekv {

struct PrefillOptions {
  int n_batch = 512;             // tokens per forward call
  int64_t max_rows = 0;          // the longest sequence the cache will see; 0 = unknown (a stream)
  bool reset = true;             // clear the cache first (false: continue where it stands)
  bool as_prompt = true;         // one prompt for the policies that act at its end (snapkv)
  Logits logits = Logits::last;  // what the last update returns (last or none; earlier ones: none)
  // A prompt into an empty cache (reset, or nothing seen yet) whose policy scores by context
  // reconstruction (kvzip) is reconstructed before it ends (engine/reconstruction.h): read once
  // after the whole prompt, or after every chunk when the policy streams. False: never.
  bool reconstruct = true;
};

// One prompt of n_tokens fed at the caller's pace: next() is the size of the next update, take()
// takes it (the server peeks to fit a step's token budget), and after the last update's forward
// call finish() ends the prompt. start() (the first take() calls it) resets the cache when asked,
// gives a measuring allocator its bound and begins the prompt. The updates are n_batch chunks,
// each in pieces of max_distance + 1 tokens when a span-rule cache needs them: exactly the updates
// Engine::forward makes of prefill()'s chunks.
class PromptFeed {
 public:
  PromptFeed(Engine& engine, ModelCache& cache, int64_t n_tokens, const PrefillOptions& options);

  void start();
  int64_t next() const;  // 0 when done
  int64_t take();        // returns next(); the update is [fed() before, fed() after)
  // `prompt`: the prompt's tokens, for a policy that scores by context reconstruction (read once:
  // the server's prompts); without them such a policy chooses without its scores.
  void finish(std::span<const int32_t> prompt = {});

  bool done() const { return fed_ == n_tokens_; }
  int64_t fed() const { return fed_; }
  bool chunk_done() const { return fed_ == chunk_end_; }  // the last take() ended an n_batch chunk

 private:
  Engine& engine_;
  ModelCache& cache_;
  int64_t n_tokens_;
  PrefillOptions options_;
  int64_t clamp_;  // the span rule's distance (0: the rule does not apply)
  bool started_ = false;
  bool fresh_ = false;  // the prompt goes into an empty cache (a context reconstruction may follow)
  int64_t fed_ = 0;
  int64_t chunk_end_ = 0;  // end of the n_batch chunk being fed
  int64_t piece_ = 0;      // its pieces' size (0: the chunk is one update)
};

// The whole prompt at once. `after_chunk(tokens_done)` is called after each n_batch chunk
// (resident-memory statistics).
void prefill(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens, const PrefillOptions& options,
             std::vector<float>& logits, const std::function<void(int64_t)>& after_chunk = {});

}  // namespace squeezekv
