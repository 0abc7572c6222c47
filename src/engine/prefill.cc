#include "squeezekv/engine/prefill.h"

#include <algorithm>
#include <limits>

#include "squeezekv/base/errors.h"
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

void PromptFeed::finish() {
  start();
  if (options_.as_prompt) engine_.end_prompt(cache_);
}

void prefill(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens, const PrefillOptions& options,
             std::vector<float>& logits, const std::function<void(int64_t)>& after_chunk) {
  PromptFeed feed(engine, cache, int64_t(tokens.size()), options);
  feed.start();
  while (!feed.done()) {
    const int64_t first = feed.fed();
    const int64_t n = feed.take();
    engine.forward(tokens.subspan(size_t(first), size_t(n)), cache, feed.done() ? options.logits : Logits::none,
                   logits);
    if (after_chunk && feed.chunk_done()) after_chunk(feed.fed());
  }
  feed.finish();
}

}  // namespace squeezekv
