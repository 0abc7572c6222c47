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

#include "ops/query_blocks-inl.h"  // NOLINT: per-target code, inside this namespace on purpose

// R queries against two vectors of keys (columns [j, j + cols) of kt): 2R accumulators in
// registers, each step one query element broadcast against contiguous transposed keys (the
// micro-kernel shape of a GEMM). Every logit sums its head_dim products in the same order
// whatever R is, so the tiling does not change a bit.
template <size_t R, class D>
HWY_INLINE void QueryRowsTile(D d, const float* q, size_t ld_q, const float* kt, size_t ld_kt, size_t j, size_t cols,
                              size_t dim, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  hn::Vec<D> c0[R], c1[R];
  for (size_t r = 0; r < R; ++r) c0[r] = c1[r] = hn::Zero(d);
  for (size_t k = 0; k < dim; ++k) {
    const float* krow = kt + k * ld_kt + j;
    const auto k0 = hn::LoadU(d, krow), k1 = hn::LoadU(d, krow + N);
    for (size_t r = 0; r < R; ++r) {
      const auto qk = hn::Set(d, q[r * ld_q + k]);
      c0[r] = hn::MulAdd(qk, k0, c0[r]);
      c1[r] = hn::MulAdd(qk, k1, c1[r]);
    }
  }
  if (cols == 2 * N) {  // a whole tile: stored as it is
    for (size_t r = 0; r < R; ++r) {
      hn::StoreU(c0[r], d, out + r * ld_out + j);
      hn::StoreU(c1[r], d, out + r * ld_out + j + N);
    }
    return;
  }
  HWY_ALIGN float tmp[32];
  for (size_t r = 0; r < R; ++r) {
    hn::Store(c0[r], d, tmp);
    hn::Store(c1[r], d, tmp + N);
    std::copy(tmp, tmp + cols, out + r * ld_out + j);
  }
}

// Queries a pass: half the accumulators a pass may hold, 8 queries x 2 vectors where there are
// 32 vector registers (two key loads and eight broadcasts per 16 multiply-adds; 4 a pass left the
// FMA units waiting: 1.30 -> 1.02 ms of attention per token, Gemma 3 pp512 at depth 8192), 4 on
// AVX2's 16 registers.
constexpr size_t kQueriesPerPass = kAccumulators / 2;

// The last R or fewer queries of a block in one pass (a GQA group of 3 leaves 63 queries a block).
template <size_t R, class D>
HWY_INLINE void QueryRowsLeft(D d, size_t left, const float* q, size_t ld_q, const float* kt, size_t ld_kt, size_t j,
                              size_t cols, size_t dim, float* out, size_t ld_out) {
  if constexpr (R > 0) {
    if (left == R) return QueryRowsTile<R>(d, q, ld_q, kt, ld_kt, j, cols, dim, out, ld_out);
    QueryRowsLeft<R - 1>(d, left, q, ld_q, kt, ld_kt, j, cols, dim, out, ld_out);
  }
}

// Register-blocked over 32 keys at a time (16 on AVX2): kQueriesPerPass queries a pass, then the
// rest in one pass. The keys' transposed tile (head_dim x 128 bytes) stays in L1 across the passes.
void QueryBlockDots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n, size_t dim,
                    float* out, size_t ld_out) {
  const hn::CappedTag<float, 16> d;  // 2 vectors of at most 16 columns fit ld_kt's padding to 32
  const size_t step = 2 * hn::Lanes(d);
  for (size_t j = 0; j < n; j += step) {
    const size_t cols = std::min(step, n - j);
    for (size_t i = 0; i < m; i += kQueriesPerPass) {
      const size_t left = std::min(kQueriesPerPass, m - i);
      if (left == kQueriesPerPass) {
        QueryRowsTile<kQueriesPerPass>(d, q + i * ld_q, ld_q, kt, ld_kt, j, cols, dim, out + i * ld_out, ld_out);
      } else {
        QueryRowsLeft<kQueriesPerPass - 1>(d, left, q + i * ld_q, ld_q, kt, ld_kt, j, cols, dim, out + i * ld_out,
                                           ld_out);
      }
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

size_t transposed_keys_stride(size_t n) {
  const size_t tiles = (n + 31) / 32;
  return (tiles % 2 == 0 ? tiles + 1 : tiles) * 32;
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
