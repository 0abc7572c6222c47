// The f16 K/V format (IEEE half per value): its codec and row kernels, compiled once per
// instruction set by Highway from the float formats' drivers (kv_float_rows-inl.h).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/kv_format_kernels.h"
#include "ops/stream_prefetch.h"
#include "squeezekv/base/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_format_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "ops/query_blocks-inl.h"   // NOLINT: per-target code, inside this namespace on purpose
#include "ops/kv_dots-inl.h"        // NOLINT
#include "ops/kv_float_rows-inl.h"  // NOLINT

struct F16Values {
  static constexpr KVType kType = KVType::f16;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const void* rows, size_t offset) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, static_cast<const hwy::float16_t*>(rows) + offset));
  }
  static HWY_INLINE float LoadOne(const void* rows, size_t offset) {
    return fp16_to_f32(static_cast<const uint16_t*>(rows)[offset]);
  }
};

// Round to nearest even, as f32_to_fp16 (the target's conversion where it has one).
void F16Store(const float* src, void* dst, size_t n, size_t /*dim*/) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const size_t N = hn::Lanes(d);
  auto* out = static_cast<hwy::float16_t*>(dst);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, out + i);
  for (; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_fp16(src[i]);
}
void F16Load(const void* src, float* dst, size_t n, size_t /*dim*/) { FloatLoadRows<F16Values>(src, dst, n); }
void F16DotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                  size_t ld_out) {
  FloatDotsGroup<F16Values>(q, n_q, ld_q, rows, n_rows, dim, out, ld_out);
}
void F16WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                         float* out, size_t ld_out) {
  FloatWeightedSumGroup<F16Values>(w, n_w, ld_w, rows, n_rows, dim, out, ld_out);
}
bool F16TurnedDots(const float* q, size_t n_q, size_t ld_q, const void* rows, const int32_t* shifts, size_t n_rows,
                   size_t dim, size_t n_rot, bool neox, const float* turns, float* out, size_t ld_out) {
  return FloatTurnedDots<F16Values>(q, n_q, ld_q, rows, shifts, n_rows, dim, n_rot, neox, turns, out, ld_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(F16Store);
HWY_EXPORT(F16Load);
HWY_EXPORT(F16DotsGroup);
HWY_EXPORT(F16WeightedSumGroup);
HWY_EXPORT(F16TurnedDots);

const KVRowKernels kv_f16_kernels = {
    .unfit = kv_fits_any_head_dim,
    .store = SQUEEZEKV_KV_DISPATCH(F16Store),
    .load = SQUEEZEKV_KV_DISPATCH(F16Load),
    .load_row_scalar =
        [](const uint8_t* row, size_t dim, float* out) {
          for (size_t i = 0; i < dim; ++i) out[i] = fp16_to_f32(load_u16(row + 2 * i));
        },
    .dots_group = SQUEEZEKV_KV_DISPATCH(F16DotsGroup),
    .weighted_sum_group = SQUEEZEKV_KV_DISPATCH(F16WeightedSumGroup),
    .turned_dots = SQUEEZEKV_KV_DISPATCH(F16TurnedDots),
};

}  // namespace squeezekv
#endif  // HWY_ONCE
