#include "squeezekv/eval/continuation_perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

ContinuationResult continuation_perplexity(Engine& engine, ModelCache& cache, std::span<const int32_t> tokens,
                                           int n_batch) {
  require(tokens.size() >= 2, "tokens", tokens.size(), "a continuation needs 2 tokens or more to score one");
  require(n_batch >= 1, "n_batch", n_batch, "must be >= 1");
  const auto start = std::chrono::steady_clock::now();
  const int vocab = engine.model().config().vocab;
  ContinuationResult r;
  std::vector<float> logits;
  double nll = 0.0;
  for (size_t first = 0; first < tokens.size(); first += size_t(n_batch)) {
    const size_t n = std::min(tokens.size() - first, size_t(n_batch));
    engine.forward(tokens.subspan(first, n), cache, Logits::all, logits);
    // Row k predicts token first + k + 1 (the update's last row, the next update's first token).
    for (size_t k = 0; k < n && first + k + 1 < tokens.size(); ++k) {
      const float* row = logits.data() + k * size_t(vocab);
      nll += logsumexp(row, vocab) - double(row[size_t(tokens[first + k + 1])]);
      ++r.scored;
    }
    r.peak_kept_bytes = std::max(r.peak_kept_bytes, double(cache.kept_bytes()));
  }
  r.tokens = int64_t(tokens.size());
  r.mean_nll = nll / double(r.scored);
  r.perplexity = std::exp(r.mean_nll);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace squeezekv
