// BF16 weights: the row kernel (each bfloat16 widened to f32, then DotFloat's f32 products, as
// DotHalf in matmul_rows-inl.h). Compiled once per SIMD target (foreach_target); the driver
// (matmul.cc) reaches MatmulRowsBF16 through the traits table (tensor_type.cc).
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_bf16.cc"
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

struct BF16Rows {
  static HWY_INLINE float Dot(const uint8_t* row, const float* x, int64_t n) {
    return DotHalf<hwy::bfloat16_t>(row, x, n);
  }
};

// Rows [row_begin, row_end) of w times every token of the call.
void MatmulRowsBF16(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                    float* HWY_RESTRICT y) {
  FloatRows<BF16Rows>(w, in, row_begin, row_end, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(MatmulRowsBF16);

namespace {

void rows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end, float* y) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsBF16)(w, in, row_begin, row_end, y);
}

}  // namespace

extern const detail::WeightKernels bf16_kernels;
const detail::WeightKernels bf16_kernels{rows, nullptr};

}  // namespace squeezekv
#endif  // HWY_ONCE
