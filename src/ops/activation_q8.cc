// Per-block 8-bit quantisation of activations (see activation_q8.h).
#include "ops/activation_q8.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "squeezekv/base/fp16.h"

namespace squeezekv::detail {

namespace {

// Round to nearest, ties to even, for |r| < 2^22: adding 1.5 * 2^23 leaves the rounded integer in
// the low mantissa bits (ggml's nearest_int; vectorises, unlike lrintf, and matches the
// _mm256_round_ps that ggml's AVX2 quantiser uses).
inline int round_half_even(float r) { return std::bit_cast<int32_t>(r + 12582912.0f) - 0x4B400000; }

inline float fp16_round(float v) { return fp16_to_f32(f32_to_fp16(v)); }

}  // namespace

void QuantizedActivations::assign(const float* x, int64_t n_tok, int64_t n_cols, bool super_blocks) {
  const auto n = static_cast<size_t>(n_tok * n_cols);
  const size_t n_blocks = n / activation_block;
  q.resize(n);
  q8.resize(n);
  scale.resize(n_blocks);
  scaled_sum.resize(n_blocks);
  q8_0_offset.resize(n_blocks);
  q6_k_offset.resize(2 * n_blocks);
  if (super_blocks) {
    assign_super_blocks(x, n_blocks);
    return;
  }
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * activation_block;
    float amax = 0.0f;
    for (int64_t i = 0; i < activation_block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const int32_t total = quantize_block(xb, amax != 0.0f ? 127.0f / amax : 0.0f, b);
    const float s = amax / 127.0f;
    scale[b] = fp16_round(s);
    scaled_sum[b] = fp16_round(s * static_cast<float>(total));
  }
}

void QuantizedActivations::assign_super_blocks(const float* x, size_t n_blocks) {
  constexpr size_t kPerSuper = 256 / activation_block;
  for (size_t sb = 0; sb < n_blocks / kPerSuper; ++sb) {
    const float* xs = x + sb * 256;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i) {
      if (std::fabs(xs[i]) > amax) {
        amax = std::fabs(xs[i]);
        max = xs[i];
      }
    }
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    const float d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    for (size_t b = sb * kPerSuper; b < (sb + 1) * kPerSuper; ++b) {
      const int32_t total = quantize_block(x + b * activation_block, iscale, b);
      scale[b] = d;
      scaled_sum[b] = d * static_cast<float>(total);
    }
  }
}

int32_t QuantizedActivations::quantize_block(const float* xb, float inv, size_t b) {
  int16_t* qb = q.data() + b * activation_block;
  int8_t* q8b = q8.data() + b * activation_block;
  int32_t total = 0, first_half = 0;
  for (int64_t i = 0; i < activation_block; ++i) {
    // |x * inv| <= 127 up to rounding (ggml clamps only at 127); the clamp also keeps NaN in range.
    const int v = std::clamp(round_half_even(xb[i] * inv), -127, 127);
    qb[i] = static_cast<int16_t>(v);
    q8b[i] = static_cast<int8_t>(v);
    total += v;
    if (i < activation_block / 2) first_half += v;
  }
  q8_0_offset[b] = -128 * total;
  q6_k_offset[2 * b] = -32 * first_half;
  q6_k_offset[2 * b + 1] = -32 * (total - first_half);
  return total;
}

}  // namespace squeezekv::detail
