#include "squeezekv/engine/prefill.h"

#include <algorithm>
#include <limits>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {

void prefill(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens,
             const PrefillOptions& options, std::vector<float>& logits,
             const std::function<void(int64_t)>& after_chunk) {
  require(options.n_batch >= 1, "n_batch", options.n_batch, "must be >= 1");
  if (options.reset) cache.reset();
  if (BudgetCoordinator* coordinator = cache.coordinator()) {
    // The allocator's bound is an int; a longer sequence is as good as unbounded to it.
    const int64_t most = std::numeric_limits<int>::max();
    coordinator->set_max_rows(int(std::clamp<int64_t>(options.max_rows, 0, most)));
  }
  if (options.as_prompt) engine.begin_prompt(cache);
  const auto n_total = int64_t(tokens.size());
  for (int64_t i = 0; i < n_total; i += options.n_batch) {
    const int64_t n = std::min<int64_t>(options.n_batch, n_total - i);
    engine.forward(tokens.subspan(size_t(i), size_t(n)), cache, i + n == n_total ? options.logits : Logits::none,
                   logits);
    if (after_chunk) after_chunk(i + n);
  }
  if (options.as_prompt) engine.end_prompt(cache);
}


}  // namespace squeezekv
