// Per-block 8-bit quantisation of activations (see activation_q8.h). The codes are computed once
// per instruction set by Highway (a prompt chunk quantises every token's input to every product on
// the calling thread: SmolLM2 pp512 spent as long there as a third of its products, scalar); the
// scales stay scalar, one a block. The scalar form is the tests' oracle.
#include "ops/activation_q8.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/activation_q8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes, so that each half of a block (16 codes: Q6_K's offsets) is whole vectors.
using DF = hn::CappedTag<float, 16>;

// The largest |x| over n elements (a multiple of the lanes); NaNs skipped, as std::max(amax,
// fabs(x)) skips them.
HWY_INLINE float AbsMax(const float* x, size_t n) {
  const DF d;
  auto acc = hn::Zero(d);
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const auto a = hn::Abs(hn::LoadU(d, x + i));
    acc = hn::IfThenElse(hn::Gt(a, acc), a, acc);
  }
  return hn::GetLane(hn::MaxOfLanes(d, acc));
}

// Block b's codes, clamp(round-half-even(x * inv), -127, 127) as the scalar round_half_even
// below forms them (x * inv + 1.5 * 2^23, its bits less those of 1.5 * 2^23), and its
// integer offsets; returns the sum of its codes.
HWY_INLINE int32_t QuantizeBlockCodes(const float* xb, float inv, int16_t* qb, int8_t* q8b, int32_t* q8_0_offset,
                                      int32_t* q6_k_offset) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int16_t, DF> d16;
  const hn::Rebind<int8_t, DF> d8;
  const size_t N = hn::Lanes(d);
  const auto vinv = hn::Set(d, inv), magic = hn::Set(d, 12582912.0f);
  const auto bias = hn::Set(di, 0x4B400000), lo = hn::Set(di, -127), hi = hn::Set(di, 127);
  auto halves = hn::Zero(di), second = hn::Zero(di);
  for (size_t i = 0; i < size_t(activation_block); i += N) {
    const auto r = hn::Add(hn::Mul(hn::LoadU(d, xb + i), vinv), magic);
    const auto v = hn::Min(hn::Max(hn::Sub(hn::BitCast(di, r), bias), lo), hi);
    hn::StoreU(hn::DemoteTo(d16, v), d16, qb + i);
    hn::StoreU(hn::DemoteTo(d8, v), d8, q8b + i);
    if (i < size_t(activation_block) / 2) {
      halves = hn::Add(halves, v);
    } else {
      second = hn::Add(second, v);
    }
  }
  const int32_t first_half = hn::GetLane(hn::SumOfLanes(di, halves));
  const int32_t total = first_half + hn::GetLane(hn::SumOfLanes(di, second));
  *q8_0_offset = -128 * total;
  q6_k_offset[0] = -32 * first_half;
  q6_k_offset[1] = -32 * (total - first_half);
  return total;
}

void QuantizeBlocks(const float* x, size_t n_blocks, QuantizedCodes out) {
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * activation_block;
    const float amax = AbsMax(xb, activation_block);
    const int32_t total =
        QuantizeBlockCodes(xb, amax != 0.0f ? 127.0f / amax : 0.0f, out.q + b * activation_block,
                           out.q8 + b * activation_block, out.q8_0_offset + b, out.q6_k_offset + 2 * b);
    const float s = amax / 127.0f;
    out.scale[b] = fp16_round(s);
    out.scaled_sum[b] = fp16_round(s * static_cast<float>(total));
  }
}

void QuantizeSuperBlocks(const float* x, size_t n_blocks, QuantizedCodes out) {
  constexpr size_t kPerSuper = 256 / activation_block;
  const DF d;
  for (size_t sb = 0; sb < n_blocks / kPerSuper; ++sb) {
    const float* xs = x + sb * 256;
    const float amax = AbsMax(xs, 256);
    // The first element of that magnitude: its sign gives the scale's.
    float max = 0.0f;
    for (size_t i = 0; amax != 0.0f && i < 256; i += hn::Lanes(d)) {
      const intptr_t at = hn::FindFirstTrue(d, hn::Eq(hn::Abs(hn::LoadU(d, xs + i)), hn::Set(d, amax)));
      if (at >= 0) {
        max = xs[i + size_t(at)];
        break;
      }
    }
    const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
    const float scale = amax != 0.0f ? 1.0f / iscale : 0.0f;
    for (size_t b = sb * kPerSuper; b < (sb + 1) * kPerSuper; ++b) {
      const int32_t total =
          QuantizeBlockCodes(x + b * activation_block, iscale, out.q + b * activation_block,
                             out.q8 + b * activation_block, out.q8_0_offset + b, out.q6_k_offset + 2 * b);
      out.scale[b] = scale;
      out.scaled_sum[b] = scale * static_cast<float>(total);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv::detail {

HWY_EXPORT(QuantizeBlocks);
HWY_EXPORT(QuantizeSuperBlocks);

QuantizedCodes QuantizedActivations::codes(size_t first_block) {
  const size_t first = first_block * activation_block;
  return {q.data() + first,
          q8.data() + first,
          scale.data() + first_block,
          scaled_sum.data() + first_block,
          q8_0_offset.data() + first_block,
          q6_k_offset.data() + 2 * first_block};
}

void QuantizedActivations::assign(const float* x, int64_t n_tok, int64_t n_cols, bool super_blocks, ThreadPool* pool) {
  resize(n_tok, n_cols);
  // Blocks [b0, b1): whole tokens, so whole super-blocks.
  auto quantize = [&](size_t b0, size_t b1) {
    const float* xb = x + b0 * activation_block;
    if (super_blocks) {
      HWY_DYNAMIC_DISPATCH(QuantizeSuperBlocks)(xb, b1 - b0, codes(b0));
    } else {
      HWY_DYNAMIC_DISPATCH(QuantizeBlocks)(xb, b1 - b0, codes(b0));
    }
  };
  const auto blocks_a_token = size_t(n_cols / activation_block);
  const size_t workers = pool != nullptr ? pool->num_workers() : 1;
  if (workers == 1 || n_tok < kParallelTokens) return quantize(0, size_t(n_tok) * blocks_a_token);
  const size_t tokens_a_task = (size_t(n_tok) + workers - 1) / workers;
  pool->parallel_for(workers, [&](size_t task, size_t /*worker*/) {
    const size_t t0 = std::min(size_t(n_tok), task * tokens_a_task);
    const size_t t1 = std::min(size_t(n_tok), t0 + tokens_a_task);
    if (t0 < t1) quantize(t0 * blocks_a_token, t1 * blocks_a_token);
  });
}

namespace {

// Round to nearest, ties to even, for |r| < 2^22: adding 1.5 * 2^23 leaves the rounded integer in
// the low mantissa bits (ggml's nearest_int; vectorises, unlike lrintf, and matches the
// _mm256_round_ps that ggml's AVX2 quantiser uses).
inline int round_half_even(float r) { return std::bit_cast<int32_t>(r + 12582912.0f) - 0x4B400000; }

}  // namespace

void QuantizedActivations::resize(int64_t n_tok, int64_t n_cols) {
  const auto n = static_cast<size_t>(n_tok * n_cols);
  const size_t n_blocks = n / activation_block;
  q.resize(n);
  q8.resize(n);
  scale.resize(n_blocks);
  scaled_sum.resize(n_blocks);
  q8_0_offset.resize(n_blocks);
  q6_k_offset.resize(2 * n_blocks);
}

void QuantizedActivations::assign_scalar(const float* x, int64_t n_tok, int64_t n_cols, bool super_blocks) {
  resize(n_tok, n_cols);
  const size_t n_blocks = scale.size();
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
#endif  // HWY_ONCE
