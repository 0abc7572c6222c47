// F32 weights: the row kernel (products in f32 with SIMD partial sums, DotFloat in
// matmul_rows-inl.h). Compiled once per SIMD target (foreach_target); the driver (matmul.cc)
// reaches MatmulRowsF32 through the traits table (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/activation_q8.h"
#include "ops/matmul_rows-inl.h"
#include "ops/weight_kernels.h"
#include "squeezekv/ops/weight_matrix.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct F32Rows {
  static HWY_INLINE float Dot(const uint8_t* row, const float* x, int64_t n) {
    const DF df;
    const auto* w = reinterpret_cast<const float*>(row);
    return DotFloat(
        x, n, [&](int64_t i) { return hn::LoadU(df, w + i); }, [&](int64_t i) { return w[i]; });
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsF32(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                   float* HWY_RESTRICT y) {
  FloatRows<F32Rows>(w, in, row_begin, row_end, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsF32);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsF32)(w, in, row_begin, row_end, y);
}

}  // namespace

extern const detail::WeightKernels f32_kernels;
const detail::WeightKernels f32_kernels{rows, nullptr};

}  // namespace squeezekv
#endif  // HWY_ONCE
