// SIMD kernels over cached K/V rows, compiled once per instruction set by Highway and picked at
// run time (HWY_DYNAMIC_DISPATCH). The scalar twins at the end are the test oracles.
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kv_rows.h"
#include "ops/kv_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kv_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads lanes of row `r` starting at element `i` as f32, whatever the storage type.
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const void* rows, KVType type, size_t offset) {
  if (type == KVType::f32) return hn::LoadU(d, static_cast<const float*>(rows) + offset);
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, static_cast<const hwy::float16_t*>(rows) + offset));
}

HWY_INLINE float LoadOne(const void* rows, KVType type, size_t offset) {
  if (type == KVType::f32) return static_cast<const float*>(rows)[offset];
  return fp16_to_f32(static_cast<const uint16_t*>(rows)[offset]);
}

#include "ops/query_blocks-inl.h"  // NOLINT: per-target code, inside this namespace on purpose

// ---- Block formats (q8_0, q4_0), decoded in registers ----
// A kernel over quantized rows walks each row block by block; a vector of N lanes never crosses a
// block (q8_0: B % N == 0; q4_0: (B / 2) % N == 0, its low and high nibbles giving two vectors),
// so the dispatchers below pick the widest of full, 8, 4 and 1 lanes that divides the block.

template <class D>
HWY_INLINE bool QuantFits(D d, KVType type, size_t B) {
  const size_t N = hn::Lanes(d);
  return type == KVType::q8_0 ? B % N == 0 : (B / 2) % N == 0;
}

// N int8 codes as f32.
template <class D>
HWY_INLINE hn::Vec<D> Q8Codes(D d, const uint8_t* p) {
  const hn::Rebind<int8_t, D> d8;
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
}

// N bytes of q4_0 codes: lo = low nibbles - 8 (elements w..), hi = high nibbles - 8 (w + B/2..).
template <class D>
HWY_INLINE void Q4Codes(D d, const uint8_t* p, hn::Vec<D>& lo, hn::Vec<D>& hi) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int32_t, D> di;
  const auto b = hn::PromoteTo(di, hn::LoadU(d8, p));
  const auto eight = hn::Set(di, 8);
  lo = hn::ConvertTo(d, hn::Sub(hn::And(b, hn::Set(di, 15)), eight));
  hi = hn::ConvertTo(d, hn::Sub(hn::ShiftRight<4>(b), eight));
}

// out[g * ld_out] = dot(q + g * ld_q, row) for g < G: per block, the codes' dot with the query
// (one code vector serves the G queries), scaled once by the block's d.
template <size_t G, class D>
HWY_INLINE void QDotRow(D d, const float* q, size_t ld_q, const uint8_t* row, KVType type, size_t dim,
                        size_t B, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const bool q8 = type == KVType::q8_0;
  const size_t block_bytes = q8 ? 2 + B : 2 + B / 2;
  const size_t half = B / 2;
  hn::Vec<D> acc[G];
  for (size_t g = 0; g < G; ++g) acc[g] = hn::Zero(d);
  for (size_t b = 0; b < dim / B; ++b) {
    const uint8_t* blk = row + b * block_bytes;
    const float* qb = q + b * B;
    hn::Vec<D> sub[G];
    for (size_t g = 0; g < G; ++g) sub[g] = hn::Zero(d);
    if (q8) {
      for (size_t w = 0; w < B; w += N) {
        const auto x = Q8Codes(d, blk + 2 + w);
        for (size_t g = 0; g < G; ++g) sub[g] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w), x, sub[g]);
      }
    } else {
      for (size_t w = 0; w < half; w += N) {
        hn::Vec<D> lo, hi;
        Q4Codes(d, blk + 2 + w, lo, hi);
        for (size_t g = 0; g < G; ++g) {
          sub[g] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w), lo, sub[g]);
          sub[g] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w + half), hi, sub[g]);
        }
      }
    }
    const auto scale = hn::Set(d, kvq::block_scale(blk));
    for (size_t g = 0; g < G; ++g) acc[g] = hn::MulAdd(scale, sub[g], acc[g]);
  }
  for (size_t g = 0; g < G; ++g) out[g * ld_out] = hn::GetLane(hn::SumOfLanes(d, acc[g]));
}

template <class D>
void QRowDotsGroupT(D d, const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                    size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  InBlocksOfFour(n_q, [&](auto block, size_t g) {
    constexpr size_t G = decltype(block)::value;
    for (size_t j = 0; j < n_rows; ++j) {
      QDotRow<G>(d, q + g * ld_q, ld_q, base + j * rb, type, dim, B, out + g * ld_out + j, ld_out);
    }
  });
}

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j: per block and lane range the G
// accumulators stay in registers over every row; a row's weight is folded into its block scale.
template <size_t G, class D>
HWY_INLINE void QWeightedSumPass(D d, const float* w, size_t ld_w, const void* rows, KVType type,
                                 size_t n_rows, size_t dim, const float* scales, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
  const bool q8 = type == KVType::q8_0;
  const size_t block_bytes = q8 ? 2 + B : 2 + B / 2;
  const size_t half = B / 2;
  const auto* base = static_cast<const uint8_t*>(rows);
  auto all_zero = [&](size_t j) {
    for (size_t g = 0; g < G; ++g) {
      if (w[g * ld_w + j] != 0.0f) return false;
    }
    return true;
  };
  for (size_t b = 0; b < dim / B; ++b) {
    const size_t width = q8 ? B : half;
    for (size_t i = 0; i < width; i += N) {
      const size_t e = b * B + i;
      hn::Vec<D> lo[G], hi[G];
      for (size_t g = 0; g < G; ++g) {
        lo[g] = hn::LoadU(d, out + g * ld_out + e);
        hi[g] = q8 ? hn::Zero(d) : hn::LoadU(d, out + g * ld_out + e + half);
      }
      for (size_t j = 0; j < n_rows; ++j) {
        if (all_zero(j)) continue;
        const uint8_t* blk = base + j * rb + b * block_bytes;
        const float s = scales[j * (dim / B) + b];
        if (q8) {
          const auto x = Q8Codes(d, blk + 2 + i);
          for (size_t g = 0; g < G; ++g) lo[g] = hn::MulAdd(hn::Set(d, w[g * ld_w + j] * s), x, lo[g]);
        } else {
          hn::Vec<D> xl, xh;
          Q4Codes(d, blk + 2 + i, xl, xh);
          for (size_t g = 0; g < G; ++g) {
            const auto ws = hn::Set(d, w[g * ld_w + j] * s);
            lo[g] = hn::MulAdd(ws, xl, lo[g]);
            hi[g] = hn::MulAdd(ws, xh, hi[g]);
          }
        }
      }
      for (size_t g = 0; g < G; ++g) {
        hn::StoreU(lo[g], d, out + g * ld_out + e);
        if (!q8) hn::StoreU(hi[g], d, out + g * ld_out + e + half);
      }
    }
  }
}

template <class D>
void QWeightedSumGroupT(D d, const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                        size_t n_rows, size_t dim, float* out, size_t ld_out) {
  // Every block's fp16 scale decoded once per call (the passes read each once per lane range).
  // The buffer only grows (geometrically): no allocation per decode step once warm.
  thread_local std::vector<float> scales;
  const size_t B = kv_block_size(type, dim), nb = dim / B, rb = kv_row_bytes(type, dim);
  const size_t block_bytes = type == KVType::q8_0 ? 2 + B : 2 + B / 2;
  if (scales.size() < n_rows * nb) scales.resize(std::max(n_rows * nb, 2 * scales.size()));
  const auto* base = static_cast<const uint8_t*>(rows);
  for (size_t j = 0; j < n_rows; ++j) {
    for (size_t b = 0; b < nb; ++b) scales[j * nb + b] = kvq::block_scale(base + j * rb + b * block_bytes);
  }
  InBlocksOfFour(n_w, [&](auto block, size_t g) {
    QWeightedSumPass<decltype(block)::value>(d, w + g * ld_w, ld_w, rows, type, n_rows, dim, scales.data(),
                                             out + g * ld_out, ld_out);
  });
}

// Runs f(tag) with the widest tag whose lanes fit the format's blocks.
template <class F>
HWY_INLINE void WithQuantTag(KVType type, size_t dim, const F& f) {
  const size_t B = kv_block_size(type, dim);
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 8> d8;
  const hn::CappedTag<float, 4> d4;
  if (QuantFits(d, type, B)) return f(d);
  if (QuantFits(d8, type, B)) return f(d8);
  if (QuantFits(d4, type, B)) return f(d4);
  f(hn::CappedTag<float, 1>());
}

template <class D>
void StoreRowsT(D d, const float* src, void* dst, KVType type, size_t n) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  if (type == KVType::f32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const hn::Rebind<hwy::float16_t, D> dh;
  auto* out = static_cast<hwy::float16_t*>(dst);
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, out + i);
  for (; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_fp16(src[i]);
}

void StoreRows(const float* src, void* dst, KVType type, size_t n, size_t dim) {
  if (kv_quantized(type)) {  // once per stored row: scalar, exactly llama.cpp's reference
    if (dim == 0) dim = n;
    const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
    for (size_t r = 0; r < n / dim; ++r) {
      kvq::quantize_row(src + r * dim, type == KVType::q8_0, dim, B, static_cast<uint8_t*>(dst) + r * rb);
    }
    return;
  }
  StoreRowsT(hn::ScalableTag<float>(), src, dst, type, n);
}

void LoadRows(const void* src, KVType type, float* dst, size_t n, size_t dim) {
  if (kv_quantized(type)) {
    if (dim == 0) dim = n;
    const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
    for (size_t r = 0; r < n / dim; ++r) {
      kvq::dequantize_row(static_cast<const uint8_t*>(src) + r * rb, type == KVType::q8_0, dim, B, dst + r * dim);
    }
    return;
  }
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadRow(d, src, type, i), d, dst + i);
  for (; i < n; ++i) dst[i] = LoadOne(src, type, i);
}

// Four rows per pass so each query vector load serves four dot products.
template <class D>
void RowDotsT(D d, const float* q, const void* rows, KVType type, size_t n_rows, size_t dim,
              float* out) {
  const size_t N = hn::Lanes(d);
  const size_t vec_end = dim - dim % N;
  size_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t i = 0; i < vec_end; i += N) {
      const auto qv = hn::LoadU(d, q + i);
      a0 = hn::MulAdd(qv, LoadRow(d, rows, type, (j + 0) * dim + i), a0);
      a1 = hn::MulAdd(qv, LoadRow(d, rows, type, (j + 1) * dim + i), a1);
      a2 = hn::MulAdd(qv, LoadRow(d, rows, type, (j + 2) * dim + i), a2);
      a3 = hn::MulAdd(qv, LoadRow(d, rows, type, (j + 3) * dim + i), a3);
    }
    float s[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), hn::GetLane(hn::SumOfLanes(d, a1)),
                  hn::GetLane(hn::SumOfLanes(d, a2)), hn::GetLane(hn::SumOfLanes(d, a3))};
    for (size_t i = vec_end; i < dim; ++i) {
      for (size_t r = 0; r < 4; ++r) s[r] += q[i] * LoadOne(rows, type, (j + r) * dim + i);
    }
    std::copy(s, s + 4, out + j);
  }
  for (; j < n_rows; ++j) {
    auto acc = hn::Zero(d);
    for (size_t i = 0; i < vec_end; i += N) {
      acc = hn::MulAdd(hn::LoadU(d, q + i), LoadRow(d, rows, type, j * dim + i), acc);
    }
    float s = hn::GetLane(hn::SumOfLanes(d, acc));
    for (size_t i = vec_end; i < dim; ++i) s += q[i] * LoadOne(rows, type, j * dim + i);
    out[j] = s;
  }
}

void RowDots(const float* q, const void* rows, KVType type, size_t n_rows, size_t dim,
             float* out) {
  if (kv_quantized(type)) {
    return WithQuantTag(type, dim, [&](auto dq) { QRowDotsGroupT(dq, q, 1, dim, rows, type, n_rows, dim, out, 1); });
  }
  const hn::ScalableTag<float> d;
  // Short rows (e.g. head_dim 8 on a 16-lane target) use narrower vectors instead of scalars.
  if (dim < hn::Lanes(d)) return RowDotsT(hn::CappedTag<float, 8>(), q, rows, type, n_rows, dim, out);
  RowDotsT(d, q, rows, type, n_rows, dim, out);
}

template <class D>
void WeightedSumT(D d, const float* w, const void* rows, KVType type, size_t n_rows, size_t dim,
                  float* out) {
  const size_t N = hn::Lanes(d);
  const size_t vec_end = dim - dim % N;
  for (size_t i = 0; i < vec_end; i += N) {
    auto acc = hn::LoadU(d, out + i);
    for (size_t j = 0; j < n_rows; ++j) {
      if (w[j] == 0.0f) continue;
      acc = hn::MulAdd(hn::Set(d, w[j]), LoadRow(d, rows, type, j * dim + i), acc);
    }
    hn::StoreU(acc, d, out + i);
  }
  for (size_t i = vec_end; i < dim; ++i) {
    float acc = out[i];
    for (size_t j = 0; j < n_rows; ++j) {
      if (w[j] != 0.0f) acc += w[j] * LoadOne(rows, type, j * dim + i);
    }
    out[i] = acc;
  }
}

void WeightedSum(const float* w, const void* rows, KVType type, size_t n_rows, size_t dim,
                 float* out) {
  if (kv_quantized(type)) {
    return WithQuantTag(type, dim, [&](auto dq) { QWeightedSumGroupT(dq, w, 1, n_rows, rows, type, n_rows, dim, out, dim); });
  }
  const hn::ScalableTag<float> d;
  if (dim < hn::Lanes(d)) return WeightedSumT(hn::CappedTag<float, 8>(), w, rows, type, n_rows, dim, out);
  WeightedSumT(d, w, rows, type, n_rows, dim, out);
}

// Up to 4 queries per pass (4 accumulators, one row load); wider groups take several passes.
template <size_t G, class D>
HWY_INLINE void RowDotsGroupPass(D d, const float* q, size_t ld_q, const void* rows, KVType type,
                                 size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t vec_end = dim - dim % N;
  for (size_t j = 0; j < n_rows; ++j) {
    hn::Vec<D> acc[G];
    for (size_t g = 0; g < G; ++g) acc[g] = hn::Zero(d);
    for (size_t i = 0; i < vec_end; i += N) {
      const auto row = LoadRow(d, rows, type, j * dim + i);
      for (size_t g = 0; g < G; ++g) acc[g] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), row, acc[g]);
    }
    for (size_t g = 0; g < G; ++g) {
      float s = hn::GetLane(hn::SumOfLanes(d, acc[g]));
      for (size_t i = vec_end; i < dim; ++i) s += q[g * ld_q + i] * LoadOne(rows, type, j * dim + i);
      out[g * ld_out + j] = s;
    }
  }
}

template <class D>
void RowDotsGroupT(D d, const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                   size_t n_rows, size_t dim, float* out, size_t ld_out) {
  InBlocksOfFour(n_q, [&](auto block, size_t g) {
    RowDotsGroupPass<decltype(block)::value>(d, q + g * ld_q, ld_q, rows, type, n_rows, dim, out + g * ld_out, ld_out);
  });
}

void RowDotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                  size_t n_rows, size_t dim, float* out, size_t ld_out) {
  if (kv_quantized(type)) {
    return WithQuantTag(type, dim, [&](auto dq) { QRowDotsGroupT(dq, q, n_q, ld_q, rows, type, n_rows, dim, out, ld_out); });
  }
  const hn::ScalableTag<float> d;
  if (dim < hn::Lanes(d)) {
    return RowDotsGroupT(hn::CappedTag<float, 8>(), q, n_q, ld_q, rows, type, n_rows, dim, out, ld_out);
  }
  RowDotsGroupT(d, q, n_q, ld_q, rows, type, n_rows, dim, out, ld_out);
}

template <size_t G, class D>
HWY_INLINE void WeightedSumGroupPass(D d, const float* w, size_t ld_w, const void* rows, KVType type,
                                     size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t vec_end = dim - dim % N;
  auto all_zero = [&](size_t j) {
    for (size_t g = 0; g < G; ++g) {
      if (w[g * ld_w + j] != 0.0f) return false;
    }
    return true;
  };
  for (size_t i = 0; i < vec_end; i += N) {
    hn::Vec<D> acc[G];
    for (size_t g = 0; g < G; ++g) acc[g] = hn::LoadU(d, out + g * ld_out + i);
    for (size_t j = 0; j < n_rows; ++j) {
      if (all_zero(j)) continue;
      const auto row = LoadRow(d, rows, type, j * dim + i);
      for (size_t g = 0; g < G; ++g) acc[g] = hn::MulAdd(hn::Set(d, w[g * ld_w + j]), row, acc[g]);
    }
    for (size_t g = 0; g < G; ++g) hn::StoreU(acc[g], d, out + g * ld_out + i);
  }
  for (size_t i = vec_end; i < dim; ++i) {
    for (size_t g = 0; g < G; ++g) {
      float acc = out[g * ld_out + i];
      for (size_t j = 0; j < n_rows; ++j) {
        if (!all_zero(j)) acc += w[g * ld_w + j] * LoadOne(rows, type, j * dim + i);
      }
      out[g * ld_out + i] = acc;
    }
  }
}

template <class D>
void WeightedSumGroupT(D d, const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                       size_t n_rows, size_t dim, float* out, size_t ld_out) {
  InBlocksOfFour(n_w, [&](auto block, size_t g) {
    WeightedSumGroupPass<decltype(block)::value>(d, w + g * ld_w, ld_w, rows, type, n_rows, dim, out + g * ld_out, ld_out);
  });
}

void WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                      size_t n_rows, size_t dim, float* out, size_t ld_out) {
  if (kv_quantized(type)) {
    return WithQuantTag(type, dim, [&](auto dq) { QWeightedSumGroupT(dq, w, n_w, ld_w, rows, type, n_rows, dim, out, ld_out); });
  }
  const hn::ScalableTag<float> d;
  if (dim < hn::Lanes(d)) {
    return WeightedSumGroupT(hn::CappedTag<float, 8>(), w, n_w, ld_w, rows, type, n_rows, dim, out, ld_out);
  }
  WeightedSumGroupT(d, w, n_w, ld_w, rows, type, n_rows, dim, out, ld_out);
}

// Register-blocked: 4 queries x 2 vectors of keys per pass, broadcasting one query element at a
// time against contiguous transposed keys (the micro-kernel shape of a GEMM).
void QueryBlockDots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt,
                    size_t n, size_t dim, float* out, size_t ld_out) {
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

// One row's first n_rot elements, in place: o[i] = o[i] * cos[i] + o[partner(i)] * sin[i].
HWY_INLINE void TurnScalar(float* o, size_t n_rot, bool neox, const float* cs, const float* sn) {
  const size_t half = n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = o[a], x1 = o[b];
    o[a] = x0 * cs[a] + x1 * sn[a];
    o[b] = x1 * cs[b] + x0 * sn[b];
  }
}

void RotateRowsBack(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t dim,
                    size_t n_rot, bool neox, const float* turns, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t half = n_rot / 2;
  const bool vec = N >= 2 && (neox ? half % N == 0 : n_rot % N == 0);
  LoadRows(rows, type, out, n_rows * dim, dim);
  for (size_t j = 0; j < n_rows; ++j) {
    if (shifts[j] <= 0) continue;
    float* o = out + j * dim;
    const float* cs = turns + size_t(shifts[j]) * 2 * n_rot;
    const float* sn = cs + n_rot;
    if (!vec) {
      TurnScalar(o, n_rot, neox, cs, sn);
    } else if (!neox) {  // pairs are adjacent lanes: the partner vector is x with pairs swapped
      for (size_t i = 0; i < n_rot; i += N) {
        const auto x = hn::LoadU(d, o + i);
        const auto turned = hn::Add(hn::Mul(x, hn::LoadU(d, cs + i)), hn::Mul(hn::Reverse2(d, x), hn::LoadU(d, sn + i)));
        hn::StoreU(turned, d, o + i);
      }
    } else {
      for (size_t i = 0; i < half; i += N) {
        const auto lo = hn::LoadU(d, o + i), hi = hn::LoadU(d, o + i + half);
        hn::StoreU(hn::Add(hn::Mul(lo, hn::LoadU(d, cs + i)), hn::Mul(hi, hn::LoadU(d, sn + i))), d, o + i);
        hn::StoreU(hn::Add(hn::Mul(hi, hn::LoadU(d, cs + i + half)), hn::Mul(lo, hn::LoadU(d, sn + i + half))), d,
                   o + i + half);
      }
    }
  }
}


// Dots of n_q queries against keys turned back by their shifts: each row decoded and turned in a
// stack row (L1, never a copy of the rows), then dotted as RowDotsGroup dots an f32 row.
void RowDotsRotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                    const int32_t* shifts, size_t n_rows, size_t dim, size_t n_rot, bool neox,
                    const float* turns, float* out, size_t ld_out) {
  HWY_ALIGN float stack[512];
  std::vector<float> heap;
  float* row = stack;
  if (dim > 512) {
    heap.resize(dim);
    row = heap.data();
  }
  const size_t rb = kv_row_bytes(type, dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  for (size_t j = 0; j < n_rows; ++j) {
    RotateRowsBack(base + j * rb, type, shifts + j, 1, dim, n_rot, neox, turns, row);
    if (n_q == 1) RowDots(q, row, KVType::f32, 1, dim, out + j);
    else RowDotsGroup(q, n_q, ld_q, row, KVType::f32, 1, dim, out + j, ld_out);
  }
}

// x *= scale first (in the same pass as the maximum; scale 1 leaves every bit as it is).
bool MaskedSoftmax(float* x, const uint8_t* mask, size_t n, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t j = 0; j < n; ++j) {
    x[j] *= scale;
    if (mask[j]) mx = std::max(mx, x[j]);
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(x, x + n, 0.0f);
    return false;
  }
  for (size_t j = 0; j < n; ++j) x[j] = mask[j] ? x[j] - mx : -std::numeric_limits<float>::infinity();
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  auto acc = hn::Zero(d);
  // Exp of -inf is 0, so masked lanes drop out; the lower bound keeps Exp in its valid domain.
  const auto lo = hn::Set(d, -87.0f);
  for (; j + N <= n; j += N) {
    const auto v = hn::LoadU(d, x + j);
    const auto e = hn::IfThenZeroElse(hn::Lt(v, lo), hn::CallExp(d, hn::Max(v, lo)));
    hn::StoreU(e, d, x + j);
    acc = hn::Add(acc, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; j < n; ++j) {
    x[j] = x[j] < -87.0f ? 0.0f : std::exp(x[j]);
    sum += x[j];
  }
  const auto inv = hn::Set(d, 1.0f / sum);
  j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), inv), d, x + j);
  for (; j < n; ++j) x[j] *= 1.0f / sum;
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace squeezekv {

HWY_EXPORT(StoreRows);
HWY_EXPORT(LoadRows);
HWY_EXPORT(RowDots);
HWY_EXPORT(WeightedSum);
HWY_EXPORT(QueryBlockDots);
HWY_EXPORT(RowDotsGroup);
HWY_EXPORT(WeightedSumGroup);
HWY_EXPORT(MaskedSoftmax);
HWY_EXPORT(RotateRowsBack);
HWY_EXPORT(RowDotsRotated);

const char* kv_type_unfit(KVType type, size_t head_dim) {
  if (!kv_quantized(type)) return "";
  if (head_dim >= 32 && head_dim % 32 != 0) return "block formats need head_dim < 32 or a multiple of 32";
  if (type == KVType::q4_0 && head_dim % 2 != 0) return "q4_0 needs an even head_dim (two codes a byte)";
  return "";
}

bool query_probs_rotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                         const int32_t* shifts, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                         const float* turns, const uint8_t* mask, float scale, float* probs, size_t ld) {
  HWY_DYNAMIC_DISPATCH(RowDotsRotated)(q, n_q, ld_q, rows, type, shifts, n_rows, head_dim, n_rot, neox, turns,
                                       probs, ld);
  bool any = false;
  for (size_t g = 0; g < n_q; ++g) any = HWY_DYNAMIC_DISPATCH(MaskedSoftmax)(probs + g * ld, mask, n_rows, scale);
  return any;
}

void rotate_rows_back(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t head_dim,
                      size_t n_rot, bool neox, const float* turns, float* out) {
  HWY_DYNAMIC_DISPATCH(RotateRowsBack)(rows, type, shifts, n_rows, head_dim, n_rot, neox, turns, out);
}

// Row j of `rows` as f32 (the scalar twins' decoder).
static void scalar_row(const void* rows, KVType type, size_t j, size_t dim, float* out) {
  const auto* row = static_cast<const uint8_t*>(rows) + j * kv_row_bytes(type, dim);
  if (kv_quantized(type)) {
    kvq::dequantize_row(row, type == KVType::q8_0, dim, kv_block_size(type, dim), out);
    return;
  }
  for (size_t i = 0; i < dim; ++i) {
    if (type == KVType::f32) {
      std::memcpy(out + i, row + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      out[i] = fp16_to_f32(h);
    }
  }
}

void rotate_rows_back_scalar(const void* rows, KVType type, const int32_t* shifts, size_t n_rows,
                             size_t head_dim, size_t n_rot, bool neox, const float* turns, float* out) {
  for (size_t j = 0; j < n_rows; ++j) scalar_row(rows, type, j, head_dim, out + j * head_dim);
  const size_t half = n_rot / 2;
  for (size_t j = 0; j < n_rows; ++j) {
    if (shifts[j] <= 0) continue;
    float* o = out + j * head_dim;
    const float* cs = turns + size_t(shifts[j]) * 2 * n_rot;
    const float* sn = cs + n_rot;
    for (size_t i = 0; i < half; ++i) {
      const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const float x0 = o[a], x1 = o[b];
      o[a] = x0 * cs[a] + x1 * sn[a];
      o[b] = x1 * cs[b] + x0 * sn[b];
    }
  }
}

void rope_turn_row(const float* cos_sin, size_t n_rot, bool neox, float* turn) {
  // R(-s) per pair (a, b): a' = a cos + b sin, b' = b cos - a sin.
  float* cs = turn;
  float* sn = turn + n_rot;
  const size_t half = n_rot / 2;
  for (size_t i = 0; i < half; ++i) {
    const size_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    cs[a] = cs[b] = cos_sin[2 * i];
    sn[a] = cos_sin[2 * i + 1];
    sn[b] = -cos_sin[2 * i + 1];
  }
}


void store_rows(const float* src, void* dst, KVType type, size_t n, size_t head_dim) {
  HWY_DYNAMIC_DISPATCH(StoreRows)(src, dst, type, n, head_dim);
}
void load_rows(const void* src, KVType type, float* dst, size_t n, size_t head_dim) {
  HWY_DYNAMIC_DISPATCH(LoadRows)(src, type, dst, n, head_dim);
}
void row_dots(const float* q, const void* rows, KVType type, size_t n_rows, size_t head_dim,
              float* out) {
  HWY_DYNAMIC_DISPATCH(RowDots)(q, rows, type, n_rows, head_dim, out);
}
void rows_weighted_sum(const float* w, const void* rows, KVType type, size_t n_rows,
                       size_t head_dim, float* out) {
  HWY_DYNAMIC_DISPATCH(WeightedSum)(w, rows, type, n_rows, head_dim, out);
}
void row_dots_group(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                    size_t n_rows, size_t head_dim, float* out, size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(RowDotsGroup)(q, n_q, ld_q, rows, type, n_rows, head_dim, out, ld_out);
}
void rows_weighted_sum_group(const float* w, size_t n_w, size_t ld_w, const void* rows,
                             KVType type, size_t n_rows, size_t head_dim, float* out,
                             size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(WeightedSumGroup)(w, n_w, ld_w, rows, type, n_rows, head_dim, out, ld_out);
}
void query_block_dots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt,
                      size_t n, size_t head_dim, float* out, size_t ld_out) {
  HWY_DYNAMIC_DISPATCH(QueryBlockDots)(q, m, ld_q, kt, ld_kt, n, head_dim, out, ld_out);
}
bool masked_softmax(float* x, const uint8_t* mask, size_t n, float scale) {
  return HWY_DYNAMIC_DISPATCH(MaskedSoftmax)(x, mask, n, scale);
}

bool query_probs(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                 size_t head_dim, const uint8_t* mask, float scale, float* probs, size_t ld) {
  return query_probs_patched(q, n_q, ld_q, rows, type, n_rows, head_dim, mask, scale, probs, ld, {});
}

bool query_probs_patched(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                         size_t head_dim, const uint8_t* mask, float scale, float* probs, size_t ld,
                         RowPatches patches) {
  // One query: row_dots keeps four rows in flight; the group kernel keeps one row per query
  // group. Both give the same bits (row_dots_group's contract), so take the faster one.
  if (n_q == 1) row_dots(q, rows, type, n_rows, head_dim, probs);
  else row_dots_group(q, n_q, ld_q, rows, type, n_rows, head_dim, probs, ld);
  for (size_t j = 0; j < patches.count; ++j) {
    const auto slot = size_t(patches.slots[j]);
    if (slot >= n_rows) continue;
    for (size_t g = 0; g < n_q; ++g) {
      row_dots(q + g * ld_q, patches.keys + j * head_dim, KVType::f32, 1, head_dim, probs + g * ld + slot);
    }
  }
  bool any = false;
  for (size_t g = 0; g < n_q; ++g) any = HWY_DYNAMIC_DISPATCH(MaskedSoftmax)(probs + g * ld, mask, n_rows, scale);
  return any;
}

void row_dots_scalar(const float* q, const void* rows, KVType type, size_t n_rows,
                     size_t head_dim, float* out) {
  std::vector<float> row(head_dim);
  for (size_t j = 0; j < n_rows; ++j) {
    scalar_row(rows, type, j, head_dim, row.data());
    double acc = 0;
    for (size_t i = 0; i < head_dim; ++i) acc += double(q[i]) * row[i];
    out[j] = static_cast<float>(acc);
  }
}

void rows_weighted_sum_scalar(const float* w, const void* rows, KVType type, size_t n_rows,
                              size_t head_dim, float* out) {
  std::vector<double> acc(out, out + head_dim);
  std::vector<float> row(head_dim);
  for (size_t j = 0; j < n_rows; ++j) {
    scalar_row(rows, type, j, head_dim, row.data());
    for (size_t i = 0; i < head_dim; ++i) acc[i] += double(w[j]) * row[i];
  }
  for (size_t i = 0; i < head_dim; ++i) out[i] = static_cast<float>(acc[i]);
}

void row_dots_group_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                           size_t n_rows, size_t head_dim, float* out, size_t ld_out) {
  for (size_t g = 0; g < n_q; ++g) row_dots_scalar(q + g * ld_q, rows, type, n_rows, head_dim, out + g * ld_out);
}

void rows_weighted_sum_group_scalar(const float* w, size_t n_w, size_t ld_w, const void* rows,
                                    KVType type, size_t n_rows, size_t head_dim, float* out,
                                    size_t ld_out) {
  for (size_t g = 0; g < n_w; ++g) {
    rows_weighted_sum_scalar(w + g * ld_w, rows, type, n_rows, head_dim, out + g * ld_out);
  }
}

void row_dots_rotated_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                             const int32_t* shifts, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                             const float* turns, float* out, size_t ld_out) {
  std::vector<float> turned(n_rows * head_dim);
  rotate_rows_back_scalar(rows, type, shifts, n_rows, head_dim, n_rot, neox, turns, turned.data());
  row_dots_group_scalar(q, n_q, ld_q, turned.data(), KVType::f32, n_rows, head_dim, out, ld_out);
}

void query_block_dots_scalar(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt,
                             size_t n, size_t head_dim, float* out, size_t ld_out) {
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
