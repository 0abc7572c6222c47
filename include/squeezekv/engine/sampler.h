// Sampler: greedy at temperature 0, else temperature + top-k + top-p from a seeded generator, so
// the same seed always gives the same text.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace squeezekv {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 40;            // 0 = all tokens
  float top_p = 0.95f;       // 1 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);  // InvalidArgument for out-of-range values
  int32_t sample(const float* logits, int vocab);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace squeezekv
