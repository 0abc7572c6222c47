// Attention probabilities over cached rows: the masked softmax (compiled once per instruction set
// by Highway), and query_probs with its patched and rotated forms, the dots then the softmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "squeezekv/ops/kv_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_attention_probs.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// x *= scale first (in the same pass as the maximum; scale 1 leaves every bit as it is).
bool MaskedSoftmax(float* x, const uint8_t* mask, size_t n, float scale) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  // The mask's bytes as a lane mask (its N bytes widened).
  auto kept = [&](size_t j) {
    return hn::RebindMask(d, hn::Ne(hn::PromoteTo(du, hn::LoadU(d8, mask + j)), hn::Zero(du)));
  };
  // Scale and maximum in one pass (the maximum is exact in any order: the same bits as a scalar pass).
  const auto vscale = hn::Set(d, scale);
  auto vmax = hn::Set(d, -kInf);
  size_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = hn::Mul(hn::LoadU(d, x + j), vscale);
    hn::StoreU(v, d, x + j);
    vmax = hn::IfThenElse(kept(j), hn::Max(v, vmax), vmax);  // (x86: a NaN v keeps vmax, as std::max)
  }
  float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; j < n; ++j) {
    x[j] *= scale;
    if (mask[j]) mx = std::max(mx, x[j]);
  }
  if (mx == -kInf) {
    std::fill(x, x + n, 0.0f);
    return false;
  }
  const auto vmx = hn::Set(d, mx), minus_inf = hn::Set(d, -kInf);
  for (j = 0; j + N <= n; j += N) {
    hn::StoreU(hn::IfThenElse(kept(j), hn::Sub(hn::LoadU(d, x + j), vmx), minus_inf), d, x + j);
  }
  for (; j < n; ++j) x[j] = mask[j] ? x[j] - mx : -kInf;
  j = 0;
  // The f32 exponentials are summed in double, as ggml's soft_max does: the sum then does not
  // depend on the vector width (AVX2 and AVX-512 give the same probabilities).
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const size_t half = hn::Lanes(dd);
  auto acc = hn::Zero(dd);
  // Exp of -inf is 0, so masked lanes drop out; the lower bound keeps Exp in its valid domain.
  const auto lo = hn::Set(d, -87.0f);
  for (; j + N <= n; j += N) {
    const auto v = hn::LoadU(d, x + j);
    const auto e = hn::IfThenZeroElse(hn::Lt(v, lo), hn::CallExp(d, hn::Max(v, lo)));
    hn::StoreU(e, d, x + j);
    for (size_t k = 0; k < N; k += half) acc = hn::Add(acc, hn::PromoteTo(dd, hn::LoadU(dh, x + j + k)));
  }
  double sum = hn::GetLane(hn::SumOfLanes(dd, acc));
  for (; j < n; ++j) {
    x[j] = x[j] < -87.0f ? 0.0f : std::exp(x[j]);
    sum += double(x[j]);
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  const auto inv = hn::Set(d, inv_sum);
  j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), inv), d, x + j);
  for (; j < n; ++j) x[j] *= inv_sum;
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MaskedSoftmax);

bool masked_softmax(float* x, const uint8_t* mask, size_t n, float scale) {
  return HWY_DYNAMIC_DISPATCH(MaskedSoftmax)(x, mask, n, scale);
}

namespace {

// The softmax of each query's logits (probs + g * ld, g < n_q).
bool softmax_rows(size_t n_q, const uint8_t* mask, size_t n_rows, float scale, float* probs, size_t ld) {
  bool any = false;
  for (size_t g = 0; g < n_q; ++g) any = HWY_DYNAMIC_DISPATCH(MaskedSoftmax)(probs + g * ld, mask, n_rows, scale);
  return any;
}

}  // namespace

bool query_probs(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows, size_t head_dim,
                 const uint8_t* mask, float scale, float* probs, size_t ld) {
  return query_probs_patched(q, n_q, ld_q, rows, type, n_rows, head_dim, mask, scale, probs, ld, {});
}

bool query_probs_patched(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                         size_t head_dim, const uint8_t* mask, float scale, float* probs, size_t ld,
                         RowPatches patches) {
  row_dots_group(q, n_q, ld_q, rows, type, n_rows, head_dim, probs, ld);
  for (size_t j = 0; j < patches.count; ++j) {
    const auto slot = size_t(patches.slots[j]);
    if (slot >= n_rows) continue;
    for (size_t g = 0; g < n_q; ++g) {
      row_dots(q + g * ld_q, patches.keys + j * head_dim, KVType::f32, 1, head_dim, probs + g * ld + slot);
    }
  }
  return softmax_rows(n_q, mask, n_rows, scale, probs, ld);
}

bool query_probs_rotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, const int32_t* shifts,
                         size_t n_rows, size_t head_dim, size_t n_rot, bool neox, const float* turns,
                         const uint8_t* mask, float scale, float* probs, size_t ld) {
  row_dots_rotated(q, n_q, ld_q, rows, type, shifts, n_rows, head_dim, n_rot, neox, turns, probs, ld);
  return softmax_rows(n_q, mask, n_rows, scale, probs, ld);
}

}  // namespace squeezekv
#endif  // HWY_ONCE
