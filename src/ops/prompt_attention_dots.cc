// query_block_dots, the float product of prompt attention, compiled once per instruction set by
// Highway and picked at run time; its scalar twin is the test oracle.
#include "squeezekv/ops/prompt_attention_dots.h"

#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/prompt_attention_dots.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register-blocked: 4 queries x 2 vectors of keys per pass, broadcasting one query element at a
// time against contiguous transposed keys (the micro-kernel shape of a GEMM).
void QueryBlockDots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n, size_t dim,
                    float* out, size_t ld_out) {
  const hn::CappedTag<float, 16> d;  // 2 vectors of at most 16 columns fit ld_kt's padding to 32
  const size_t N = hn::Lanes(d);
  const size_t step = 2 * N;
  HWY_ALIGN float tmp[4][32];
  for (size_t j = 0; j < n; j += step) {
    const size_t cols = std::min(step, n - j);
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
      auto c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
      auto c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
      for (size_t k = 0; k < dim; ++k) {
        const float* krow = kt + k * ld_kt + j;
        const auto k0 = hn::LoadU(d, krow), k1 = hn::LoadU(d, krow + N);
        const auto q0 = hn::Set(d, q[(i + 0) * ld_q + k]), q1 = hn::Set(d, q[(i + 1) * ld_q + k]);
        const auto q2 = hn::Set(d, q[(i + 2) * ld_q + k]), q3 = hn::Set(d, q[(i + 3) * ld_q + k]);
        c00 = hn::MulAdd(q0, k0, c00);
        c01 = hn::MulAdd(q0, k1, c01);
        c10 = hn::MulAdd(q1, k0, c10);
        c11 = hn::MulAdd(q1, k1, c11);
        c20 = hn::MulAdd(q2, k0, c20);
        c21 = hn::MulAdd(q2, k1, c21);
        c30 = hn::MulAdd(q3, k0, c30);
        c31 = hn::MulAdd(q3, k1, c31);
      }
      hn::Store(c00, d, tmp[0]);
      hn::Store(c01, d, tmp[0] + N);
      hn::Store(c10, d, tmp[1]);
      hn::Store(c11, d, tmp[1] + N);
      hn::Store(c20, d, tmp[2]);
      hn::Store(c21, d, tmp[2] + N);
      hn::Store(c30, d, tmp[3]);
      hn::Store(c31, d, tmp[3] + N);
      for (size_t r = 0; r < 4; ++r) std::copy(tmp[r], tmp[r] + cols, out + (i + r) * ld_out + j);
    }
    for (; i < m; ++i) {
      auto c0 = hn::Zero(d), c1 = hn::Zero(d);
      for (size_t k = 0; k < dim; ++k) {
        const float* krow = kt + k * ld_kt + j;
        const auto qk = hn::Set(d, q[i * ld_q + k]);
        c0 = hn::MulAdd(qk, hn::LoadU(d, krow), c0);
        c1 = hn::MulAdd(qk, hn::LoadU(d, krow + N), c1);
      }
      hn::Store(c0, d, tmp[0]);
      hn::Store(c1, d, tmp[0] + N);
      std::copy(tmp[0], tmp[0] + cols, out + i * ld_out + j);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(QueryBlockDots);

void query_block_dots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n, size_t head_dim,
                      float* out, size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(QueryBlockDots)(q, m, ld_q, kt, ld_kt, n, head_dim, out, ld_out);
}

void query_block_dots_scalar(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n,
                             size_t head_dim, float* out, size_t ld_out) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double acc = 0;
      for (size_t k = 0; k < head_dim; ++k) acc += double(q[i * ld_q + k]) * kt[k * ld_kt + j];
      out[i * ld_out + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace squeezekv
#endif  // HWY_ONCE
