// SIMD kernels over cached K/V rows, compiled once per instruction set by Highway and picked at
// run time (HWY_DYNAMIC_DISPATCH). The scalar twins at the end are the test oracles.
#include "squeezekv/base/fp16.h"
#include "squeezekv/ops/kv_rows.h"
#include "ops/kv_quant.h"
#include "ops/stream_prefetch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
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

// Rows stream from memory in a long decode step (a head's keys and values outgrow the caches from
// a few thousand rows): the kernels ask for them ahead (ops/stream_prefetch.h), the key dots once
// per block of rows, the value sums once per kPrefetchRows rows.
constexpr size_t kPrefetchRows = 4;

// f(j) for each row j < n_rows in order, asking for the rows ahead once per kPrefetchRows rows
// when `ask` (a tile's first pass over the rows; later passes find them in cache).
template <class F>
HWY_INLINE void ForRowsAskingAhead(const void* rows, size_t row_bytes, size_t n_rows, bool ask, const F& f) {
  for (size_t j0 = 0; j0 < n_rows; j0 += kPrefetchRows) {
    if (ask) prefetch_ahead(static_cast<const uint8_t*>(rows) + j0 * row_bytes, kPrefetchRows * row_bytes);
    for (size_t j = j0; j < std::min(n_rows, j0 + kPrefetchRows); ++j) f(j);
  }
}

// Dot products end in a horizontal sum of a vector's lanes; one per (row, query) costs more than
// the row's multiply-adds. LaneSums adds up N vectors at once into the N lanes of one vector
// (lane k = the sum of vector k's lanes): log2(N) levels, each pairing vectors by a blend, a
// lane permutation and an add. Every lane's sum is the same balanced tree over its vector's lanes
// in lane order ((v0 + v1) + (v2 + v3)) + ..., whichever vectors it is summed with, so a row's dot
// does not depend on the rows beside it in a block.
template <class D>
struct LaneSums {
  static constexpr size_t kLanes = hn::MaxLanes(D());
  static constexpr size_t kLevels = kLanes >= 16 ? 4 : kLanes >= 8 ? 3 : kLanes >= 4 ? 2 : kLanes >= 2 ? 1 : 0;
  hn::Mask<D> upper[4];             // lanes whose level bit is set
  using Indices = decltype(hn::IndicesFromVec(D(), hn::Zero(hn::RebindToUnsigned<D>())));
  Indices partner[4];               // lane i <- lane i ^ level bit

  explicit LaneSums(D d) {
    const hn::RebindToUnsigned<D> du;
    const auto iota = hn::Iota(du, 0);
    for (size_t k = 0; k < kLevels; ++k) {
      const auto bit = hn::Set(du, uint32_t{1} << k);
      upper[k] = hn::RebindMask(d, hn::TestBit(iota, bit));
      partner[k] = hn::IndicesFromVec(d, hn::Xor(iota, bit));
    }
  }
  // v[0..kLanes) in, destroyed; returns the vector of their lane sums.
  HWY_INLINE hn::Vec<D> operator()(hn::Vec<D>* v) const {
    // Unrolled whole, so that v stays in registers.
#pragma GCC unroll 4
    for (size_t k = 0; k < kLevels; ++k) {
      const size_t count = kLanes >> k;
#pragma GCC unroll 8
      for (size_t i = 0; i < count / 2; ++i) {
        const auto a = v[2 * i], b = v[2 * i + 1];
        v[i] = hn::Add(hn::IfThenElse(upper[k], b, a), hn::TableLookupLanes(hn::IfThenElse(upper[k], a, b), partner[k]));
      }
    }
    return v[0];
  }
};

// f(r) for r < count: with a constant count (std::integral_constant), unrolled with r constant,
// so that the code indexing registers by r keeps them in registers; else a plain loop.
template <class Count, class F>
HWY_INLINE void ForEachRow(Count count, const F& f) {
  if constexpr (std::is_integral_v<Count>) {
    for (size_t r = 0; r < count; ++r) f(r);
  } else {
    [&]<size_t... r>(std::index_sequence<r...>) { (f(std::integral_constant<size_t, r>()), ...); }
    (std::make_index_sequence<Count::value>());
  }
}

// Dots of G queries with every row, kLanes / G = R rows a block: block_dot(acc, j, count) adds
// the lanes of query g's dot with row j + r to acc[g * R + r] for r < count; one LaneSums per block
// then writes out[g * ld_out + j + r]. Full blocks pass count as a constant, so the row loop
// unrolls and the accumulators stay in registers; the last, shorter block leaves the missing rows'
// vectors zero.
template <size_t G, class D, class BlockDot>
HWY_INLINE void DotsInLaneBlocks(D d, size_t n_rows, float* out, size_t ld_out, const BlockDot& block_dot) {
  constexpr size_t N = LaneSums<D>::kLanes, R = N / G;
  static_assert(R >= 1, "a block holds at least one row per query");
  const LaneSums<D> sums(d);
  HWY_ALIGN float lanes[N];
  for (size_t j = 0; j < n_rows; j += R) {
    const size_t here = std::min(R, n_rows - j);
    hn::Vec<D> acc[N];
    for (size_t k = 0; k < N; ++k) acc[k] = hn::Zero(d);
    if (here == R) block_dot(acc, j, std::integral_constant<size_t, R>());
    else block_dot(acc, j, here);
    hn::Store(sums(acc), d, lanes);
    for (size_t g = 0; g < G; ++g) std::copy(lanes + g * R, lanes + g * R + here, out + g * ld_out + j);
  }
}

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

// A block's fp16 scale d, broadcast (the target's f16 conversion: vcvtph2ps where it has F16C;
// the same value as fp16_to_f32).
template <class D>
HWY_INLINE hn::Vec<D> BlockScale(D d, const uint8_t* blk) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::Set(d, hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(blk)))));
}

// f(std::true_type) for q8_0, f(std::false_type) for q4_0: the block format fixed at compile time
// in the kernels' inner loops.
template <class F>
HWY_INLINE void WithQ8(KVType type, const F& f) {
  if (type == KVType::q8_0) f(std::true_type());
  else f(std::false_type());
}

// acc[g * R + r] += the lanes of dot(q + g * ld_q, row r) for g < G, r < count (rows rb bytes
// apart): block by block, each code vector decoded and scaled by its block's d once (as the scalar
// twin dequantizes) serves the G queries.
template <size_t G, size_t R, bool kQ8, class D, class Count>
HWY_INLINE void QDotRows(D d, const float* q, size_t ld_q, const uint8_t* rows, size_t rb, Count count,
                         size_t dim, size_t B, hn::Vec<D>* acc) {
  const size_t N = hn::Lanes(d);
  const size_t block_bytes = kQ8 ? 2 + B : 2 + B / 2;
  const size_t half = B / 2;
  for (size_t b = 0; b < dim / B; ++b) {
    const float* qb = q + b * B;
    ForEachRow(count, [&](auto r) {
      const uint8_t* blk = rows + r * rb + b * block_bytes;
      const auto scale = BlockScale(d, blk);
      for (size_t w = 0; w < (kQ8 ? B : half); w += N) {
        if constexpr (kQ8) {
          const auto x = hn::Mul(Q8Codes(d, blk + 2 + w), scale);
          for (size_t g = 0; g < G; ++g) acc[g * R + r] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w), x, acc[g * R + r]);
        } else {
          hn::Vec<D> lo, hi;
          Q4Codes(d, blk + 2 + w, lo, hi);
          lo = hn::Mul(lo, scale);
          hi = hn::Mul(hi, scale);
          for (size_t g = 0; g < G; ++g) {
            acc[g * R + r] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w), lo, acc[g * R + r]);
            acc[g * R + r] = hn::MulAdd(hn::LoadU(d, qb + g * ld_q + w + half), hi, acc[g * R + r]);
          }
        }
      }
    });
  }
}

template <class D>
void QRowDotsGroupT(D d, const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                    size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  InBlocksOfFour(n_q, [&](auto block, size_t g) {
    constexpr size_t G = decltype(block)::value;
    WithQ8(type, [&](auto q8) {
      constexpr bool kQ8 = decltype(q8)::value;
      if constexpr (LaneSums<D>::kLanes >= 4) {
        constexpr size_t R = LaneSums<D>::kLanes / G;
        DotsInLaneBlocks<G>(d, n_rows, out + g * ld_out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
          prefetch_ahead(base + j * rb, size_t(count) * rb);
          QDotRows<G, R, kQ8>(d, q + g * ld_q, ld_q, base + j * rb, rb, count, dim, B, acc);
        });
      } else {  // one or two lanes: a row at a time
        for (size_t j = 0; j < n_rows; ++j) {
          hn::Vec<D> acc[G];
          for (size_t i = 0; i < G; ++i) acc[i] = hn::Zero(d);
          QDotRows<G, 1, kQ8>(d, q + g * ld_q, ld_q, base + j * rb, rb, std::integral_constant<size_t, 1>(), dim, B, acc);
          for (size_t i = 0; i < G; ++i) out[(g + i) * ld_out + j] = hn::GetLane(hn::SumOfLanes(d, acc[i]));
        }
      }
    });
  });
}

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j over the elements of vectors [v0, v0 + kVecs)
// (v0 even) of blocks [b0, b0 + kBlocks) (kBlocks > 1: whole blocks, v0 = 0): rows outer, each row
// read once, while the G x kBlocks x kVecs accumulators stay in registers; each code vector is
// scaled by its d once (as the scalar twin dequantizes) and serves the G queries.
template <size_t G, size_t kBlocks, size_t kVecs, bool kQ8, class D>
HWY_INLINE void QWeightedSumBlock(D d, const float* w, size_t ld_w, const uint8_t* base, size_t rb, size_t n_rows,
                                  size_t B, size_t b0, size_t v0, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t block_bytes = kQ8 ? 2 + B : 2 + B / 2;
  const size_t half = B / 2;
  // Lane offsets of the block's kVecs vectors: q8_0 w = 0, N, ...; q4_0 the low nibbles' elements
  // w then the high ones' w + half, per byte vector.
  hn::Vec<D> acc[G][kBlocks][kVecs];
  auto offset = [&](size_t k, size_t v) {
    return (b0 + k) * B + (kQ8 ? (v0 + v) * N : ((v0 + v) / 2) * N + (v % 2) * half);
  };
  for (size_t g = 0; g < G; ++g) {
    for (size_t k = 0; k < kBlocks; ++k) {
      for (size_t v = 0; v < kVecs; ++v) acc[g][k][v] = hn::LoadU(d, out + g * ld_out + offset(k, v));
    }
  }
  ForRowsAskingAhead(base, rb, n_rows, b0 == 0 && v0 == 0, [&](size_t j) {
    if (!AnyWeight<G>(w, ld_w, j)) return;
    hn::Vec<D> wg[G];
    for (size_t g = 0; g < G; ++g) wg[g] = hn::Set(d, w[g * ld_w + j]);
    for (size_t k = 0; k < kBlocks; ++k) {
      const uint8_t* blk = base + j * rb + (b0 + k) * block_bytes;
      const auto scale = BlockScale(d, blk);
      hn::Vec<D> x[kVecs];
      for (size_t v = 0; v < kVecs; ++v) x[v] = hn::Zero(d);  // (every one is set below)
      for (size_t v = 0; v < kVecs; v += kQ8 ? 1 : 2) {
        if constexpr (kQ8) {
          x[v] = hn::Mul(Q8Codes(d, blk + 2 + (v0 + v) * N), scale);
        } else if constexpr (kVecs >= 2) {
          Q4Codes(d, blk + 2 + ((v0 + v) / 2) * N, x[v], x[v + 1]);
          x[v] = hn::Mul(x[v], scale);
          x[v + 1] = hn::Mul(x[v + 1], scale);
        }
      }
      for (size_t g = 0; g < G; ++g) {
        for (size_t v = 0; v < kVecs; ++v) acc[g][k][v] = hn::MulAdd(wg[g], x[v], acc[g][k][v]);
      }
    }
  });
  for (size_t g = 0; g < G; ++g) {
    for (size_t k = 0; k < kBlocks; ++k) {
      for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[g][k][v], d, out + g * ld_out + offset(k, v));
    }
  }
}

template <class D>
void QWeightedSumGroupT(D d, const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                        size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim);
  // Vectors per block: q8_0 B / N code vectors; q4_0 B / (2N) byte vectors, each two
  // (WithQuantTag's lanes divide the block), in passes of at most 8 (a block of B = 32 with 16
  // lanes: one pass of 2).
  const size_t vecs = B / hn::Lanes(d);
  const auto* base = static_cast<const uint8_t*>(rows);
  InBlocksOfFour(n_w, [&](auto block, size_t g) {
    constexpr size_t G = decltype(block)::value;
    const float* wg = w + g * ld_w;
    float* og = out + g * ld_out;
    WithQ8(type, [&](auto q8) {
      constexpr bool kQ8 = decltype(q8)::value;
      const size_t n_blocks = dim / B;
      size_t b = 0;
      // Two or four whole blocks a pass where their vectors' accumulators fit (a 64-wide head of
      // q8_0 or q4_0 at 16 lanes: the whole row in one pass), so each row is read once.
      if constexpr (G * 4 * 2 <= kAccumulators) {
        if (vecs == 2) {
          for (; b + 4 <= n_blocks; b += 4) QWeightedSumBlock<G, 4, 2, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, 0, og, ld_out);
        }
      }
      if constexpr (G * 2 * 2 <= kAccumulators) {
        if (vecs == 2) {
          for (; b + 2 <= n_blocks; b += 2) QWeightedSumBlock<G, 2, 2, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, 0, og, ld_out);
        }
      }
      for (; b < n_blocks; ++b) {
        for (size_t v0 = 0; v0 < vecs;) {
          const size_t left = vecs - v0;
          if (left >= 8 && kVectorsPerQuery<G> >= 8) {
            QWeightedSumBlock<G, 1, 8, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, v0, og, ld_out);
            v0 += 8;
          } else if (left >= 4 && kVectorsPerQuery<G> >= 4) {
            QWeightedSumBlock<G, 1, 4, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, v0, og, ld_out);
            v0 += 4;
          } else if (left >= 2) {
            QWeightedSumBlock<G, 1, 2, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, v0, og, ld_out);
            v0 += 2;
          } else {  // q8_0 only: q4_0's count is even
            QWeightedSumBlock<G, 1, 1, kQ8>(d, wg, ld_w, base, rb, n_rows, B, b, v0, og, ld_out);
            v0 += 1;
          }
        }
      }
    });
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

// Block-format rows decoded in registers: each code times its block's d, the scalar decoder's
// one rounding (kvq::dequantize_row), so both give the same floats.
template <class D>
void DequantizeRowsT(D d, const uint8_t* src, KVType type, float* dst, size_t n_rows, size_t dim) {
  const size_t N = hn::Lanes(d);
  const size_t B = kv_block_size(type, dim), rb = kv_row_bytes(type, dim), half = B / 2;
  WithQ8(type, [&](auto q8) {
    constexpr bool kQ8 = decltype(q8)::value;
    const size_t block_bytes = kQ8 ? 2 + B : 2 + half;
    for (size_t r = 0; r < n_rows; ++r) {
      for (size_t b = 0; b < dim / B; ++b) {
        const uint8_t* blk = src + r * rb + b * block_bytes;
        float* o = dst + r * dim + b * B;
        const auto scale = BlockScale(d, blk);
        for (size_t w = 0; w < (kQ8 ? B : half); w += N) {
          if constexpr (kQ8) {
            hn::StoreU(hn::Mul(Q8Codes(d, blk + 2 + w), scale), d, o + w);
          } else {
            hn::Vec<D> lo, hi;
            Q4Codes(d, blk + 2 + w, lo, hi);
            hn::StoreU(hn::Mul(lo, scale), d, o + w);
            hn::StoreU(hn::Mul(hi, scale), d, o + w + half);
          }
        }
      }
    }
  });
}

void LoadRows(const void* src, KVType type, float* dst, size_t n, size_t dim) {
  if (kv_quantized(type)) {
    if (dim == 0) dim = n;
    return WithQuantTag(type, dim, [&](auto dq) {
      DequantizeRowsT(dq, static_cast<const uint8_t*>(src), type, dst, n / dim, dim);
    });
  }
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadRow(d, src, type, i), d, dst + i);
  for (; i < n; ++i) dst[i] = LoadOne(src, type, i);
}

void RowDotsGroup(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                  size_t n_rows, size_t dim, float* out, size_t ld_out);

void RowDots(const float* q, const void* rows, KVType type, size_t n_rows, size_t dim,
             float* out) {
  if (kv_quantized(type)) {
    return WithQuantTag(type, dim, [&](auto dq) { QRowDotsGroupT(dq, q, 1, dim, rows, type, n_rows, dim, out, 1); });
  }
  RowDotsGroup(q, 1, dim, rows, type, n_rows, dim, out, 1);  // one query: the group kernel's bits
}

void WeightedSumGroup(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                      size_t n_rows, size_t dim, float* out, size_t ld_out);

void WeightedSum(const float* w, const void* rows, KVType type, size_t n_rows, size_t dim,
                 float* out) {
  WeightedSumGroup(w, 1, n_rows, rows, type, n_rows, dim, out, dim);  // one query: the group kernel's bits
}

// Up to 4 queries per pass (one row load serves them); wider groups take several passes. When the
// lanes divide the row, blocks of rows end in one LaneSums instead of a horizontal sum per dot.
template <size_t G, class D>
HWY_INLINE void RowDotsGroupPass(D d, const float* q, size_t ld_q, const void* rows, KVType type,
                                 size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  if constexpr (LaneSums<D>::kLanes >= 4) {
    if (dim % N == 0) {
      constexpr size_t R = LaneSums<D>::kLanes / G;
      const size_t rb = kv_row_bytes(type, dim);
      DotsInLaneBlocks<G>(d, n_rows, out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
        prefetch_ahead(static_cast<const uint8_t*>(rows) + j * rb, size_t(count) * rb);
        for (size_t i = 0; i < dim; i += N) {
          ForEachRow(count, [&](auto r) {
            const auto row = LoadRow(d, rows, type, (j + r) * dim + i);
            for (size_t g = 0; g < G; ++g) acc[g * R + r] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), row, acc[g * R + r]);
          });
        }
      });
      return;
    }
  }
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

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j over the kVecs vectors from element i0:
// rows outer, so each row is read once, in order, while the G x kVecs accumulators stay in
// registers (columns outer read the rows once per vector: four strided passes over a 64-wide head).
// Every element still adds its rows in row order, so the sums are the same bits either way.
template <size_t G, size_t kVecs, class D>
HWY_INLINE void WeightedSumTile(D d, const float* w, size_t ld_w, const void* rows, KVType type,
                                size_t n_rows, size_t dim, size_t i0, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  hn::Vec<D> acc[G][kVecs];
  for (size_t g = 0; g < G; ++g) {
    for (size_t v = 0; v < kVecs; ++v) acc[g][v] = hn::LoadU(d, out + g * ld_out + i0 + v * N);
  }
  ForRowsAskingAhead(rows, kv_row_bytes(type, dim), n_rows, i0 == 0, [&](size_t j) {
    if (!AnyWeight<G>(w, ld_w, j)) return;
    hn::Vec<D> x[kVecs];
    for (size_t v = 0; v < kVecs; ++v) x[v] = LoadRow(d, rows, type, j * dim + i0 + v * N);
    for (size_t g = 0; g < G; ++g) {
      const auto wg = hn::Set(d, w[g * ld_w + j]);
      for (size_t v = 0; v < kVecs; ++v) acc[g][v] = hn::MulAdd(wg, x[v], acc[g][v]);
    }
  });
  for (size_t g = 0; g < G; ++g) {
    for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[g][v], d, out + g * ld_out + i0 + v * N);
  }
}

template <size_t G, class D>
HWY_INLINE void WeightedSumGroupPass(D d, const float* w, size_t ld_w, const void* rows, KVType type,
                                     size_t n_rows, size_t dim, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t vecs = dim / N, vec_end = vecs * N;
  constexpr size_t kWide = kVectorsPerQuery<G>;
  size_t v0 = 0;
  for (; v0 + kWide <= vecs; v0 += kWide) WeightedSumTile<G, kWide>(d, w, ld_w, rows, type, n_rows, dim, v0 * N, out, ld_out);
  for (; v0 + 2 <= vecs; v0 += 2) WeightedSumTile<G, 2>(d, w, ld_w, rows, type, n_rows, dim, v0 * N, out, ld_out);
  for (; v0 < vecs; ++v0) WeightedSumTile<G, 1>(d, w, ld_w, rows, type, n_rows, dim, v0 * N, out, ld_out);
  for (size_t i = vec_end; i < dim; ++i) {
    for (size_t g = 0; g < G; ++g) {
      float acc = out[g * ld_out + i];
      for (size_t j = 0; j < n_rows; ++j) {
        if (AnyWeight<G>(w, ld_w, j)) acc += w[g * ld_w + j] * LoadOne(rows, type, j * dim + i);
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


// Float rows turned back in registers and dotted in blocks of rows (DotsInLaneBlocks): element i
// of a row's first n_rot is x[i] * cs[i] + partner[i] * sn[i] (the partner: the pair's other lane,
// for neox the element half away), the products and their order RotateRowsBack's then
// RowDotsGroupPass's, so the logits are those of turning into a scratch and dotting it, bit for
// bit, without the scratch. Needs N | dim and N | n_rot (neox: N | n_rot / 2).
template <size_t G, class D>
HWY_INLINE void TurnedDotsPass(D d, const float* q, size_t ld_q, const void* rows, KVType type,
                               const int32_t* shifts, size_t n_rows, size_t dim, size_t n_rot, bool neox,
                               const float* turns, float* out, size_t ld_out) {
  const size_t N = hn::Lanes(d);
  const size_t half = n_rot / 2;
  constexpr size_t R = LaneSums<D>::kLanes / G;
  DotsInLaneBlocks<G>(d, n_rows, out, ld_out, [&](hn::Vec<D>* acc, size_t j, auto count) {
    ForEachRow(count, [&](auto r) {
      const size_t row = (j + r) * dim;
      const int32_t shift = shifts[j + r];
      const float* cs = turns + size_t(shift > 0 ? shift : 0) * 2 * n_rot;
      const float* sn = cs + n_rot;
      for (size_t i = 0; i < dim; i += N) {
        auto x = LoadRow(d, rows, type, row + i);
        if (shift > 0 && i < n_rot) {
          const auto partner = !neox ? hn::Reverse2(d, x) : LoadRow(d, rows, type, row + (i < half ? i + half : i - half));
          x = hn::Add(hn::Mul(x, hn::LoadU(d, cs + i)), hn::Mul(partner, hn::LoadU(d, sn + i)));
        }
        for (size_t g = 0; g < G; ++g) acc[g * R + r] = hn::MulAdd(hn::LoadU(d, q + g * ld_q + i), x, acc[g * R + r]);
      }
    });
  });
}

// Dots of n_q queries against keys turned back by their shifts. Float rows whose vectors fit go
// through TurnedDotsPass; the rest (block formats, odd sizes) are decoded and turned a tile of
// rows at a time on the stack (L1, never a copy of the head's rows), then dotted as RowDotsGroup
// dots f32 rows.
void RowDotsRotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                    const int32_t* shifts, size_t n_rows, size_t dim, size_t n_rot, bool neox,
                    const float* turns, float* out, size_t ld_out) {
  auto turned_dots = [&](auto d) {
    const size_t N = hn::Lanes(d);
    if constexpr (LaneSums<decltype(d)>::kLanes >= 4) {
      if (dim % N == 0 && n_rot <= dim && (neox ? (n_rot / 2) % N == 0 : n_rot % N == 0)) {
        InBlocksOfFour(n_q, [&](auto block, size_t g) {
          TurnedDotsPass<decltype(block)::value>(d, q + g * ld_q, ld_q, rows, type, shifts, n_rows, dim, n_rot, neox,
                                                 turns, out + g * ld_out, ld_out);
        });
        return true;
      }
    }
    return false;
  };
  if (!kv_quantized(type)) {
    const hn::ScalableTag<float> d;
    if (dim < hn::Lanes(d) ? turned_dots(hn::CappedTag<float, 8>()) : turned_dots(d)) return;
  }
  // A tile of 16 KiB: 64 rows at head_dim 64; a row's dot is the same bits in any tile.
  constexpr size_t kTileFloats = 4096;
  HWY_ALIGN float stack[kTileFloats];
  std::vector<float> heap;
  float* tile = stack;
  const size_t tile_rows = std::max<size_t>(1, kTileFloats / dim);
  if (dim > kTileFloats) {
    heap.resize(dim);
    tile = heap.data();
  }
  const size_t rb = kv_row_bytes(type, dim);
  const auto* base = static_cast<const uint8_t*>(rows);
  for (size_t j = 0; j < n_rows; j += tile_rows) {
    const size_t count = std::min(tile_rows, n_rows - j);
    RotateRowsBack(base + j * rb, type, shifts + j, count, dim, n_rot, neox, turns, tile);
    if (n_q == 1) RowDots(q, tile, KVType::f32, count, dim, out + j);
    else RowDotsGroup(q, n_q, ld_q, tile, KVType::f32, count, dim, out + j, ld_out);
  }
}

// x *= scale first (in the same pass as the maximum; scale 1 leaves every bit as it is).
bool MaskedSoftmax(float* x, const uint8_t* mask, size_t n, float scale) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  // The mask's bytes as a lane mask (its N bytes widened).
  auto kept = [&](size_t j) { return hn::RebindMask(d, hn::Ne(hn::PromoteTo(du, hn::LoadU(d8, mask + j)), hn::Zero(du))); };
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
