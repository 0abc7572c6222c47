// GeGLU's SIMD kernel (gelu.h; Highway, one compilation per target) and its scalar twin.
// Tails shorter than a vector go through 1-lane vectors of the same target, so every element sees
// the same arithmetic whatever its position.
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gelu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

#include <cmath>

#include "squeezekv/ops/gelu.h"

#ifndef SQUEEZEKV_GELU_CONSTANTS
#define SQUEEZEKV_GELU_CONSTANTS
namespace squeezekv::gelu_detail {
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kCubic = 0.044715f;
}  // namespace squeezekv::gelu_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) * up, in the scalar twin's order.
void Geglu(const float* gate, const float* up, int64_t n, float* out) {
  using gelu_detail::kCubic;
  using gelu_detail::kSqrt2OverPi;
  auto body = [&](auto d, int64_t i) {
    const auto x = hn::LoadU(d, gate + i);
    const auto inner = hn::Mul(hn::Mul(hn::Set(d, kSqrt2OverPi), x),
                               hn::Add(hn::Set(d, 1.0f), hn::Mul(hn::Mul(hn::Set(d, kCubic), x), x)));
    const auto t = hn::CallTanh(d, inner);
    const auto g = hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), t));
    hn::StoreU(hn::Mul(g, hn::LoadU(d, up + i)), d, out + i);
  };
  const hn::ScalableTag<float> df;
  const hn::CappedTag<float, 1> d1;
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) body(df, i);
  for (; i < n; ++i) body(d1, i);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(Geglu);

void geglu(const float* gate, const float* up, int64_t n, float* out) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(Geglu)(gate, up, n, out);
}

void geglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  using gelu_detail::kCubic;
  using gelu_detail::kSqrt2OverPi;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = (kSqrt2OverPi * x) * (1.0f + (kCubic * x) * x);
    const float g = (0.5f * x) * (1.0f + std::tanh(inner));
    out[i] = g * up[i];
  }
}

}  // namespace squeezekv
#endif  // HWY_ONCE
