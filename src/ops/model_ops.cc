// SIMD kernels of model_ops.h (Highway, one compilation per target, dispatched at run time).
// Tails shorter than a vector go through 1-lane vectors of the same target, so every element
// sees the same arithmetic whatever its position.
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/model_ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

#include <cmath>

#include "squeezekv/ops/model_ops.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using D1 = hn::CappedTag<float, 1>;

// Applies op(d, offset) to full vectors, then to the tail one lane at a time.
template <class Op>
HWY_INLINE void ForEachVector(int64_t n, Op op) {
  const DF df;
  const D1 d1;
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) op(df, i);
  for (; i < n; ++i) op(d1, i);
}

// Sum of the squares (squared in f32, summed in f64), as ggml_rms_norm.
HWY_INLINE double SumSquares(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // half-width float vectors, promoted to double
  const auto lanes = static_cast<int64_t>(hn::Lanes(dd));
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + lanes);
    s0 = hn::Add(s0, hn::PromoteTo(dd, hn::Mul(a, a)));
    s1 = hn::Add(s1, hn::PromoteTo(dd, hn::Mul(b, b)));
  }
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float mean = static_cast<float>(SumSquares(x, n) / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  ForEachVector(n, [&](auto d, int64_t i) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), hn::Set(d, scale)), hn::LoadU(d, weight + i)), d, out + i);
  });
}

void SoftmaxInplace(float* x, int64_t n) {
  const DF df;
  auto vmax = hn::Set(df, x[0]);
  float max = x[0];
  ForEachVector(n, [&](auto d, int64_t i) {
    if constexpr (hn::MaxLanes(decltype(d)()) == 1) {
      max = std::fmax(max, x[i]);
    } else {
      vmax = hn::Max(vmax, hn::LoadU(d, x + i));
    }
  });
  max = std::fmax(max, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  // exp(x - max) in place; the sum of these f32 values is taken in double, as ggml does.
  double sum = 0.0;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const auto half_lanes = static_cast<int64_t>(hn::Lanes(dd));
  auto vsum = hn::Zero(dd);
  ForEachVector(n, [&](auto d, int64_t i) {
    const auto e = hn::CallExp(d, hn::Sub(hn::LoadU(d, x + i), hn::Set(d, max)));
    hn::StoreU(e, d, x + i);
    if constexpr (hn::MaxLanes(decltype(d)()) == 1) {
      sum += static_cast<double>(hn::GetLane(e));
    } else {
      for (int64_t k = 0; k < static_cast<int64_t>(hn::Lanes(d)); k += half_lanes) {
        vsum = hn::Add(vsum, hn::PromoteTo(dd, hn::LoadU(dh, x + i + k)));
      }
    }
  });
  sum += hn::GetLane(hn::SumOfLanes(dd, vsum));
  const auto inv = static_cast<float>(1.0 / sum);
  ForEachVector(n, [&](auto d, int64_t i) { hn::StoreU(hn::Mul(hn::LoadU(d, x + i), hn::Set(d, inv)), d, x + i); });
}

void Swiglu(const float* gate, const float* up, int64_t n, float* out) {
  ForEachVector(n, [&](auto d, int64_t i) {
    const auto g = hn::LoadU(d, gate + i);
    // Exp is valid up to 104; beyond that silu(g) is -0 either way.
    const auto e = hn::CallExp(d, hn::Min(hn::Neg(g), hn::Set(d, 104.0f)));
    const auto silu = hn::Div(g, hn::Add(hn::Set(d, 1.0f), e));
    hn::StoreU(hn::Mul(silu, hn::LoadU(d, up + i)), d, out + i);
  });
}

void AddInplace(float* dst, const float* src, int64_t n) {
  ForEachVector(
      n, [&](auto d, int64_t i) { hn::StoreU(hn::Add(hn::LoadU(d, dst + i), hn::LoadU(d, src + i)), d, dst + i); });
}

void MulInplace(float* dst, const float* src, int64_t n) {
  ForEachVector(
      n, [&](auto d, int64_t i) { hn::StoreU(hn::Mul(hn::LoadU(d, dst + i), hn::LoadU(d, src + i)), d, dst + i); });
}

void ScaleInplace(float* x, int64_t n, float s) {
  ForEachVector(n, [&](auto d, int64_t i) { hn::StoreU(hn::Mul(hn::LoadU(d, x + i), hn::Set(d, s)), d, x + i); });
}

void Axpy(float* dst, const float* src, int64_t n, float a) {
  ForEachVector(n, [&](auto d, int64_t i) {
    hn::StoreU(hn::Add(hn::LoadU(d, dst + i), hn::Mul(hn::LoadU(d, src + i), hn::Set(d, a))), d, dst + i);
  });
}

float Dot(const float* a, const float* b, int64_t n) {
  const DF df;
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), s1);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(RmsNorm);
HWY_EXPORT(SoftmaxInplace);
HWY_EXPORT(Swiglu);
HWY_EXPORT(AddInplace);
HWY_EXPORT(MulInplace);
HWY_EXPORT(ScaleInplace);
HWY_EXPORT(Axpy);
HWY_EXPORT(Dot);

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(RmsNorm)(x, weight, n, eps, out);
}
void softmax_inplace(float* x, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SoftmaxInplace)(x, n);
}
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(Swiglu)(gate, up, n, out);
}
void add_inplace(float* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(AddInplace)(dst, src, n); }
void mul_inplace(float* dst, const float* src, int64_t n) { HWY_DYNAMIC_DISPATCH(MulInplace)(dst, src, n); }
void scale_inplace(float* x, int64_t n, float s) { HWY_DYNAMIC_DISPATCH(ScaleInplace)(x, n, s); }
void axpy(float* dst, const float* src, int64_t n, float a) { HWY_DYNAMIC_DISPATCH(Axpy)(dst, src, n, a); }
float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }

}  // namespace squeezekv
#endif  // HWY_ONCE
