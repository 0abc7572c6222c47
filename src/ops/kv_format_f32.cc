// The f32 K/V format (float per value): its codec and row kernels, compiled once per
// instruction set by Highway from the float formats' drivers (kv_float_rows-inl.h).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/kv_format_kernels.h"
#include "ops/stream_prefetch.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_format_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#include "ops/query_blocks-inl.h"   // NOLINT: per-target code, inside this namespace on purpose
#include "ops/kv_dots-inl.h"        // NOLINT
#include "ops/kv_float_rows-inl.h"  // NOLINT

struct F32Values {
  static constexpr KVType kType = KVType::f32;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const void* rows, size_t offset) {
    return hn::LoadU(d, static_cast<const float*>(rows) + offset);
  }
  static HWY_INLINE float LoadOne(const void* rows, size_t offset) { return static_cast<const float*>(rows)[offset]; }
};

void F32Store(const float* src, void* dst, size_t n, size_t /*dim*/) { std::memcpy(dst, src, n * sizeof(float)); }
void F32Load(const void* src, float* dst, size_t n, size_t /*dim*/) { FloatLoadRows<F32Values>(src, dst, n); }
void F32DotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, size_t n_rows, size_t dim, float* out,
                  size_t ld_out) {
  FloatDotsGroup<F32Values>(q, n_q, ld_q, rows, n_rows, dim, out, ld_out);
}
void F32WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t dim,
                         float* out, size_t ld_out) {
  FloatWeightedSumGroup<F32Values>(w, n_w, ld_w, rows, n_rows, dim, out, ld_out);
}
bool F32TurnedDots(const float* q, size_t n_q, size_t ld_q, const void* rows, const int32_t* shifts, size_t n_rows,
                   size_t dim, size_t n_rot, bool neox, const float* turns, float* out, size_t ld_out) {
  return FloatTurnedDots<F32Values>(q, n_q, ld_q, rows, shifts, n_rows, dim, n_rot, neox, turns, out, ld_out);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(F32Store);
HWY_EXPORT(F32Load);
HWY_EXPORT(F32DotsGroup);
HWY_EXPORT(F32WeightedSumGroup);
HWY_EXPORT(F32TurnedDots);

const KVRowKernels kv_f32_kernels = {
    .unfit = kv_fits_any_head_dim,
    .store = SQUEEZEKV_KV_DISPATCH(F32Store),
    .load = SQUEEZEKV_KV_DISPATCH(F32Load),
    .load_row_scalar = [](const uint8_t* row, size_t dim, float* out) { std::memcpy(out, row, dim * sizeof(float)); },
    .dots_group = SQUEEZEKV_KV_DISPATCH(F32DotsGroup),
    .weighted_sum_group = SQUEEZEKV_KV_DISPATCH(F32WeightedSumGroup),
    .turned_dots = SQUEEZEKV_KV_DISPATCH(F32TurnedDots),
};

}  // namespace squeezekv
#endif  // HWY_ONCE
