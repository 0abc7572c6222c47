// The forward pass's guard against a model with NaN or inf weights: once per layer and once on
// the logits, a cheap scan (O(n * dim) next to O(n * dim * ffn) of work) that turns a silent
// NaN perplexity or junk text into an error naming where the values broke.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {

// Throws FormatError naming the layer (-1: the logits) when data[0, n) holds NaN or inf.
inline void require_finite_activations(const float* data, size_t n, int layer) {
  // x * 0 is 0 for finite x and NaN otherwise; 8 independent sums let the loop vectorise.
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t k = 0; k < 8; ++k) acc[k] += data[i + k] * 0.0f;
  }
  for (; i < n; ++i) acc[0] += data[i] * 0.0f;
  float total = 0.0f;
  for (float a : acc) total += a;
  if (total == 0.0f) return;
  const std::string where = layer < 0 ? "the logits" : "the residual stream after layer " + std::to_string(layer);
  throw FormatError(where +
                    " holds NaN or inf (the model's weights are not finite, "
                    "or it overflows f32)");
}

}  // namespace squeezekv
