#include "squeezekv/engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "squeezekv/base/errors.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  require(options.temperature >= 0.0f && std::isfinite(options.temperature), "temp", options.temperature,
          "must be >= 0 (0 = greedy)");
  require(options.top_k >= 0, "top_k", options.top_k, "must be >= 0 (0 = all tokens)");
  require(options.top_p > 0.0f && options.top_p <= 1.0f, "top_p", options.top_p, "must lie in (0, 1]");
}

int32_t Sampler::sample(const float* logits, int vocab) {
  if (options_.temperature == 0.0f) return int32_t(argmax(logits, vocab));
  candidates_.resize(size_t(vocab));
  for (int i = 0; i < vocab; ++i) candidates_[size_t(i)] = {logits[i], i};
  // Highest logit first; ties by lower id so the order is fully determined.
  auto higher = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = options_.top_k > 0 ? std::min(size_t(options_.top_k), candidates_.size()) : candidates_.size();
  std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), higher);
  candidates_.resize(keep);
  const float top = candidates_.front().first;
  double sum = 0.0;
  for (auto& [value, id] : candidates_) {
    value = std::exp((value - top) / options_.temperature);
    sum += value;
  }
  // Nucleus: the smallest prefix whose probability reaches top_p.
  double cumulative = 0.0;
  size_t cut = candidates_.size();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += candidates_[i].first / sum;
    if (cumulative >= options_.top_p) {
      cut = i + 1;
      break;
    }
  }
  candidates_.resize(cut);
  double total = 0.0;
  for (const auto& c : candidates_) total += c.first;
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0.0;
  for (const auto& [weight, id] : candidates_) {
    acc += weight;
    if (r < acc) return id;
  }
  return candidates_.back().second;
}

}  // namespace squeezekv
