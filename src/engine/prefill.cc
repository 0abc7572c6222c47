#include "squeezekv/engine/prefill.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/reconstruction.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

PromptFeed::PromptFeed(Engine& engine, ModelCache& cache, int64_t n_tokens, const PrefillOptions& options)
    : engine_(engine),
      cache_(cache),
      n_tokens_(n_tokens),
      options_(options),
      clamp_(span_distance(cache.config(), engine.model().config().context_length)) {
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be >= 1");
  require(n_tokens >= 0, "tokens", n_tokens, "must be >= 0");
  require(options.logits != Logits::all, "logits", "all", "a prompt returns its last token's logits or none");
}

void PromptFeed::start() {
  if (started_) return;
  started_ = true;
  if (options_.reset) cache_.reset();
  fresh_ = cache_.layer(0).tokens_seen() == 0;
  if (BudgetCoordinator* coordinator = cache_.coordinator()) {
    // The allocator's bound is an int; a longer sequence is as good as unbounded to it.
    const int64_t most = std::numeric_limits<int>::max();
    coordinator->set_max_rows(int(std::clamp<int64_t>(options_.max_rows, 0, most)));
  }
  if (options_.as_prompt) engine_.begin_prompt(cache_);
}

int64_t PromptFeed::next() const {
  if (done()) return 0;
  if (fed_ < chunk_end_) return std::min(piece_, chunk_end_ - fed_);
  // A new chunk. A span-rule update whose queries would precede the clamped position goes in
  // pieces of clamp + 1 (docs/positions.md); the chunk's first position decides.
  const int64_t n = std::min<int64_t>(options_.n_batch, n_tokens_ - fed_);
  const int64_t pos0 = started_ || !options_.reset ? cache_.layer(0).tokens_seen() : 0;
  const bool pieces = clamp_ > 0 && n > clamp_ + 1 && pos0 + n - 1 >= clamp_;
  return pieces ? clamp_ + 1 : n;
}

int64_t PromptFeed::take() {
  const int64_t n = next();
  start();
  if (fed_ == chunk_end_) {
    chunk_end_ = fed_ + std::min<int64_t>(options_.n_batch, n_tokens_ - fed_);
    piece_ = n;
  }
  fed_ += n;
  return n;
}

void PromptFeed::finish(std::span<const int32_t> prompt) {
  start();
  if (!options_.as_prompt) return;
  const std::optional<ReconstructionPlan> plan =
      options_.reconstruct && fresh_ && n_tokens_ > 0 ? context_reconstruction(cache_.config()) : std::nullopt;
  if (plan && int64_t(prompt.size()) == n_tokens_) {
    reconstruct_context(engine_, cache_, prompt, 0, 0, n_tokens_, plan->chunk, options_.n_batch);
  }
  engine_.end_prompt(cache_);
}

namespace {

// The prompt's updates, without its start or end.
void feed_updates(Engine& engine, ModelCache& cache, PromptFeed& feed, std::span<const int32_t> tokens, Logits last,
                  std::vector<float>& logits, const std::function<void(int64_t)>& after_chunk, int64_t done_before) {
  while (!feed.done()) {
    const int64_t first = feed.fed();
    const int64_t n = feed.take();
    engine.forward(tokens.subspan(size_t(first), size_t(n)), cache, feed.done() ? last : Logits::none, logits);
    if (after_chunk && feed.chunk_done()) after_chunk(done_before + feed.fed());
  }
}

// A streamed reconstruction: each chunk prefilled, reconstructed over the rows held, and the cache
// compressed to its budget before the next, so the peak is the budget plus one chunk (and, while
// it is reconstructed, the chunk's reconstruction rows).
void prefill_streaming(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens,
                       const PrefillOptions& options, int chunk, std::vector<float>& logits,
                       const std::function<void(int64_t)>& after_chunk) {
  PromptFeed start(engine, cache, 0, options);
  start.start();  // reset, the allocator's bound, the prompt begun
  const auto n = int64_t(tokens.size());
  for (int64_t a = 0; a < n; a += chunk) {
    const int64_t b = std::min(n, a + chunk);
    PrefillOptions part = options;
    part.reset = false;
    part.as_prompt = false;
    part.logits = b == n ? options.logits : Logits::none;
    PromptFeed feed(engine, cache, b - a, part);
    feed_updates(engine, cache, feed, tokens.subspan(size_t(a), size_t(b - a)), part.logits, logits, after_chunk, a);
    reconstruct_context(engine, cache, tokens, 0, a, b, chunk, options.n_batch);
    cache.compress();
  }
  engine.end_prompt(cache);
}

}  // namespace

void prefill(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens, const PrefillOptions& options,
             std::vector<float>& logits, const std::function<void(int64_t)>& after_chunk) {
  const bool fresh = options.reset || cache.layer(0).tokens_seen() == 0;
  const std::optional<ReconstructionPlan> plan = options.reconstruct && fresh && options.as_prompt && !tokens.empty()
                                                     ? context_reconstruction(cache.config())
                                                     : std::nullopt;
  if (plan && plan->streaming) {
    prefill_streaming(engine, cache, tokens, options, plan->chunk, logits, after_chunk);
    return;
  }
  PromptFeed feed(engine, cache, int64_t(tokens.size()), options);
  feed.start();
  feed_updates(engine, cache, feed, tokens, options.logits, logits, after_chunk, 0);
  feed.finish(tokens);
}

}  // namespace squeezekv
