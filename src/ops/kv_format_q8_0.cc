// The q8_0 K/V format (llama.cpp's: per block of B elements an fp16 scale d and B int8 codes q,
// x = d * q): its scalar codec, llama.cpp's bytes for B = 32 (quantize_row_q8_0_ref: d = amax /
// 127, q = round(x / d)), and its row kernels, compiled once per instruction set by Highway from
// the block formats' drivers (kv_block_rows-inl.h), decoding the codes in registers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/kv_format_kernels.h"
#include "ops/stream_prefetch.h"
#include "squeezekv/base/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_format_q8_0.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "ops/query_blocks-inl.h"   // NOLINT: per-target code, inside this namespace on purpose
#include "ops/kv_dots-inl.h"        // NOLINT
#include "ops/kv_block_rows-inl.h"  // NOLINT

struct Q8Blocks {
  static constexpr KVType kType = KVType::q8_0;
  template <class D>
  static HWY_INLINE hn::Vec<D> Header(D d, const uint8_t* blk) {
    return BlockScale(d, blk);
  }
  // N int8 codes as f32, times d.
  template <class D>
  static HWY_INLINE void Decode(D d, const hn::Vec<D>& scale, const uint8_t* codes, hn::Vec<D>* x) {
    const hn::Rebind<int8_t, D> d8;
    const hn::Rebind<int32_t, D> di;
    x[0] = hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(codes)))), scale);
  }
};

void Q8Load(const void* src, float* dst, size_t n, size_t dim) { BlockLoadRows<Q8Blocks>(src, dst, n, dim); }
void Q8DotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                 size_t ld_out) {
  BlockDotsGroup<Q8Blocks>(q, n_q, ld_q, rows, n_rows, dim, out, ld_out);
}
void Q8WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                        float* out, size_t ld_out) {
  BlockWeightedSumGroup<Q8Blocks>(w, n_w, ld_w, rows, n_rows, dim, out, ld_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(Q8Load);
HWY_EXPORT(Q8DotsGroup);
HWY_EXPORT(Q8WeightedSumGroup);

namespace {

void quantize_block(const float* x, size_t B, uint8_t* block) {
  float amax = 0.0f;
  for (size_t j = 0; j < B; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(block, f32_to_fp16(d));
  // Clamped before the conversion: equal to llama.cpp's in range, defined when 1/d overflows (a
  // subnormal amax), where the fp16 scale is 0 anyway.
  for (size_t j = 0; j < B; ++j) {
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::round(x[j] * id), -127.0f, 127.0f)));
  }
}

void dequantize_block(const uint8_t* block, size_t B, float* out) {
  const float d = fp16_to_f32(load_u16(block));
  for (size_t j = 0; j < B; ++j) out[j] = d * float(static_cast<int8_t>(block[2 + j]));
}

}  // namespace

const KVRowKernels kv_q8_0_kernels = {
    .unfit = kv_blocks_unfit<KVType::q8_0>,
    // Once per stored row: scalar, exactly llama.cpp's reference.
    .store = kv_store_blocks<KVType::q8_0, quantize_block>,
    .load = SQUEEZEKV_KV_DISPATCH(Q8Load),
    .load_row_scalar = kv_load_row_blocks<KVType::q8_0, dequantize_block>,
    .dots_group = SQUEEZEKV_KV_DISPATCH(Q8DotsGroup),
    .weighted_sum_group = SQUEEZEKV_KV_DISPATCH(Q8WeightedSumGroup),
    .turned_dots = nullptr,
};

}  // namespace squeezekv
#endif  // HWY_ONCE
