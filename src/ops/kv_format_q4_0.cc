// The q4_0 K/V format (llama.cpp's: per block of B elements an fp16 scale d and B/2 bytes, byte j
// holding element j in its low nibble and element j + B/2 in its high one, x = d * (q - 8)): its
// scalar codec, llama.cpp's bytes for B = 32 (quantize_row_q4_0_ref: d = the value of largest
// magnitude / -8, q = min(15, trunc(x / d + 8.5))), and its row kernels, compiled once per
// instruction set by Highway from the block formats' drivers (kv_block_rows-inl.h), decoding the
// codes in registers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/kv_format_kernels.h"
#include "ops/stream_prefetch.h"
#include "squeezekv/base/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_format_q4_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "ops/query_blocks-inl.h"   // NOLINT: per-target code, inside this namespace on purpose
#include "ops/kv_dots-inl.h"        // NOLINT
#include "ops/kv_block_rows-inl.h"  // NOLINT

struct Q4Blocks {
  static constexpr KVType kType = KVType::q4_0;
  template <class D>
  static HWY_INLINE hn::Vec<D> Header(D d, const uint8_t* blk) {
    return BlockScale(d, blk);
  }
  // N bytes of codes times d: x[0] the low nibbles - 8 (elements w..), x[1] the high ones - 8
  // (elements w + B/2..).
  template <class D>
  static HWY_INLINE void Decode(D d, const hn::Vec<D>& scale, const uint8_t* codes, hn::Vec<D>* x) {
    const hn::Rebind<uint8_t, D> d8;
    const hn::Rebind<int32_t, D> di;
    const auto b = hn::PromoteTo(di, hn::LoadU(d8, codes));
    const auto eight = hn::Set(di, 8);
    x[0] = hn::Mul(hn::ConvertTo(d, hn::Sub(hn::And(b, hn::Set(di, 15)), eight)), scale);
    x[1] = hn::Mul(hn::ConvertTo(d, hn::Sub(hn::ShiftRight<4>(b), eight)), scale);
  }
};

void Q4Load(const void* src, float* dst, size_t n, size_t dim) { BlockLoadRows<Q4Blocks>(src, dst, n, dim); }
void Q4DotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                 size_t ld_out) {
  BlockDotsGroup<Q4Blocks>(q, n_q, ld_q, rows, n_rows, dim, out, ld_out);
}
void Q4WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                        float* out, size_t ld_out) {
  BlockWeightedSumGroup<Q4Blocks>(w, n_w, ld_w, rows, n_rows, dim, out, ld_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(Q4Load);
HWY_EXPORT(Q4DotsGroup);
HWY_EXPORT(Q4WeightedSumGroup);

namespace {

void quantize_block(const float* x, size_t B, uint8_t* block) {
  float amax = 0.0f, max = 0.0f;
  for (size_t j = 0; j < B; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(block, f32_to_fp16(d));
  const size_t half = B / 2;
  for (size_t j = 0; j < half; ++j) {
    // min(15, trunc(v)) as llama.cpp, with v clamped first so that the conversion is defined.
    const auto lo = static_cast<uint8_t>(std::clamp(x[j] * id + 8.5f, 0.0f, 15.0f));
    const auto hi = static_cast<uint8_t>(std::clamp(x[j + half] * id + 8.5f, 0.0f, 15.0f));
    block[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void dequantize_block(const uint8_t* block, size_t B, float* out) {
  const float d = fp16_to_f32(load_u16(block));
  const size_t half = B / 2;
  for (size_t j = 0; j < half; ++j) {
    out[j] = d * float(int(block[2 + j] & 15) - 8);
    out[j + half] = d * float(int(block[2 + j] >> 4) - 8);
  }
}

// Two codes a byte: the block (the row when shorter than 32) must be even.
const char* unfit(size_t head_dim) {
  if (const char* why = kv_blocks_unfit<KVType::q4_0>(head_dim); *why != '\0') return why;
  return head_dim % 2 != 0 ? "q4_0 needs an even head_dim (two codes a byte)" : "";
}

}  // namespace

const KVRowKernels kv_q4_0_kernels = {
    .unfit = unfit,
    // Once per stored row: scalar, exactly llama.cpp's reference.
    .store = kv_store_blocks<KVType::q4_0, quantize_block>,
    .load = SQUEEZEKV_KV_DISPATCH(Q4Load),
    .load_row_scalar = kv_load_row_blocks<KVType::q4_0, dequantize_block>,
    .dots_group = SQUEEZEKV_KV_DISPATCH(Q4DotsGroup),
    .weighted_sum_group = SQUEEZEKV_KV_DISPATCH(Q4WeightedSumGroup),
    .turned_dots = nullptr,
};

}  // namespace squeezekv
#endif  // HWY_ONCE
