// Per-block 8-bit quantisation of activations (see activation_q8.h).
#include "ops/activation_q8.h"

#include <algorithm>
#include <cmath>

namespace squeezekv::detail {

void QuantizedActivations::assign(const float* x, int64_t n_tok, int64_t n_cols) {
  const auto n = static_cast<size_t>(n_tok * n_cols);
  const size_t n_blocks = n / activation_block;
  q.resize(n);
  q8.resize(n);
  scale.resize(n_blocks);
  scaled_sum.resize(n_blocks);
  q8_0_offset.resize(n_blocks);
  q6_k_offset.resize(2 * n_blocks);
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * activation_block;
    float amax = 0.0f;
    for (int64_t i = 0; i < activation_block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float s = amax / 127.0f;
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    int32_t total = 0;
    int16_t* qb = q.data() + b * activation_block;
    int8_t* q8b = q8.data() + b * activation_block;
    for (int64_t i = 0; i < activation_block; ++i) {
      // Round half away from zero with a truncating conversion (vectorises, unlike lround); the
      // clamp guards against inv * amax rounding just above 127.
      const float r = xb[i] * inv;
      const int v = std::clamp(static_cast<int>(r + std::copysign(0.5f, r)), -127, 127);
      qb[i] = static_cast<int16_t>(v);
      q8b[i] = static_cast<int8_t>(v);
      total += v;
    }
    int32_t first_half = 0;
    for (int64_t i = 0; i < activation_block / 2; ++i) first_half += qb[i];
    scale[b] = s;
    scaled_sum[b] = s * static_cast<float>(total);
    q8_0_offset[b] = -128 * total;
    q6_k_offset[2 * b] = -32 * first_half;
    q6_k_offset[2 * b + 1] = -32 * (total - first_half);
  }
}

}  // namespace squeezekv::detail
