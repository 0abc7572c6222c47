// What every weight type's kernels share, per SIMD target: the vector tags, block-scale loads,
// one token's quantised activations (TokenQ8), the x86 byte products and the accumulation orders
// that the row kernels and the prompt tiles both follow, and the row drivers that run a type's
// row kernel over a task's rows and every token of a call. Included by each weight type's kernel
// file (src/ops/matmul_<type>.cc), which foreach_target compiles once per target; Highway's
// per-target include guard below lets this header be included once per target.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/activation_q8.h"
#include "squeezekv/ops/weight_matrix.h"

// clang-format off
#if defined(SQUEEZEKV_OPS_MATMUL_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SQUEEZEKV_OPS_MATMUL_ROWS_INL_H_
#undef SQUEEZEKV_OPS_MATMUL_ROWS_INL_H_
#else
#define SQUEEZEKV_OPS_MATMUL_ROWS_INL_H_
#endif
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
// Integer kernels work on at most 16 int16 lanes (half a 32-element block), which keeps the
// nibble layouts simple on every target; on AVX-512 they run on 256-bit vectors.
using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DW = hn::Repartition<float, D16>;
using DU16 = hn::RebindToUnsigned<D16>;
using DU8 = hn::Rebind<uint8_t, D16>;
using DI8 = hn::Rebind<int8_t, D16>;

// One fp16 value (block scales), using the target's conversion instruction where it has one.
HWY_INLINE float LoadHalf(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, hn::CappedTag<float, 1>> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Loads 16 bytes (or fewer on narrow targets) of packed values widened to int16.
HWY_INLINE hn::Vec<D16> LoadBytes(const uint8_t* p) {
  return hn::BitCast(D16(), hn::PromoteTo(DU16(), hn::LoadU(DU8(), p)));
}

HWY_INLINE float Sum(hn::Vec<DW> v) { return hn::GetLane(hn::SumOfLanes(DW(), v)); }

// ------------------------------ float weights

// Dot of n weights loaded by load(i) (as f32 vectors of DF) with x; 4 accumulators hide FMA latency.
template <class LoadW, class ScalarW>
HWY_INLINE float DotFloat(const float* HWY_RESTRICT x, int64_t n, LoadW load, ScalarW scalar) {
  const DF df;
  const auto lanes = static_cast<int64_t>(hn::Lanes(df));
  auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::MulAdd(load(i), hn::LoadU(df, x + i), s0);
    s1 = hn::MulAdd(load(i + lanes), hn::LoadU(df, x + i + lanes), s1);
    s2 = hn::MulAdd(load(i + 2 * lanes), hn::LoadU(df, x + i + 2 * lanes), s2);
    s3 = hn::MulAdd(load(i + 3 * lanes), hn::LoadU(df, x + i + 3 * lanes), s3);
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::MulAdd(load(i), hn::LoadU(df, x + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += scalar(i) * x[i];
  return sum;
}

template <typename T>
HWY_INLINE float DotHalf(const uint8_t* row, const float* x, int64_t n) {
  const DF df;
  const hn::Rebind<T, DF> dh;
  const auto* w = reinterpret_cast<const T*>(row);
  return DotFloat(
      x, n, [&](int64_t i) { return hn::PromoteTo(df, hn::LoadU(dh, w + i)); },
      [&](int64_t i) {  // tail: a 1-lane load, so nothing past the row is read
        const hn::CappedTag<float, 1> d1;
        return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(hn::Rebind<T, decltype(d1)>(), w + i)));
      });
}

// ------------------------------ quantised weights (integer dots with quantised x)

// x86 targets with 256-bit integer ops multiply weight bytes by int8 activations directly
// (vpmaddubsw), which Highway 1.0 has no op for; the others widen both sides to int16.
#undef SQUEEZEKV_X86_BYTE_DOT
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SQUEEZEKV_X86_BYTE_DOT 1
#else
#define SQUEEZEKV_X86_BYTE_DOT 0
#endif

// One token's quantised activations, as the multi-token kernels see them.
struct TokenQ8 {
  const int16_t* q;
  const int8_t* q8;
  const float* scale;
  const float* scaled_sum;
  const int32_t* q8_0_offset;
  const int32_t* q6_k_offset;
};

HWY_INLINE TokenQ8 token_q8(const detail::QuantizedActivations& xq, int64_t t, int64_t n) {
  const int64_t blocks = n / detail::activation_block;
  return {xq.q.data() + t * n,
          xq.q8.data() + t * n,
          xq.scale.data() + t * blocks,
          xq.scaled_sum.data() + t * blocks,
          xq.q8_0_offset.data() + t * blocks,
          xq.q6_k_offset.data() + 2 * t * blocks};
}

// The 8 sub-blocks of a super-block (or 8 blocks), one float lane each (two passes on 128-bit
// targets).
using DS = hn::CappedTag<float, 8>;
using DSI32 = hn::Rebind<int32_t, DS>;
using DSU8 = hn::Rebind<uint8_t, DS>;

#if SQUEEZEKV_X86_BYTE_DOT
// x86: weight codes stay bytes and meet int8 activations in vpmaddubsw (u8 x s8 pairs to int16)
// and vpmaddwd by 1 (pairs to int32), or vpdpbusd where the CPU has it. The int32 vectors of 8
// blocks or sub-blocks are then reduced together into one vector, lane i = block i, so 8 blocks
// cost one conversion and one multiply per token, with no broadcasts.

// Lane s of the result = the sum of v[s]'s 8 lanes.
HWY_INLINE __m256i SumEachOf8(const __m256i* v) {
  const __m256i v01 = _mm256_hadd_epi32(v[0], v[1]);  // per 128-bit half: v0 pairs, v1 pairs
  const __m256i v23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i v45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i v67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i v0123 = _mm256_hadd_epi32(v01, v23);  // [v0..v3 low-half sums | v0..v3 high-half sums]
  const __m256i v4567 = _mm256_hadd_epi32(v45, v67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(v0123, v4567, 0x20), _mm256_permute2x128_si256(v0123, v4567, 0x31));
}

// Unsigned bytes times signed bytes, summed in fours into 8 int32 lanes (pairs never saturate for
// the callers' ranges: |u| <= 128, |s| <= 127 gives at most 2 * 128 * 127 per pair, so both forms
// give the same sums). AVX3_DL CPUs have AVX512-VNNI (Highway's check for the target requires
// it), whose vpdpbusd does the two steps in one. It is written as assembly with the EVEX encoding
// spelled out: Highway 1.0's target string names avxvnni (the VEX form, which Zen 4 lacks) instead
// of avx512vnni, and with it g++ would pick the VEX encoding.
HWY_INLINE __m256i ByteDot(__m256i u, __m256i s) {
#if HWY_TARGET == HWY_AVX3_DL
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [s] "v"(s));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Signed weight bytes times signed activation bytes: |w| times x with w's sign moved onto x
// (vpsignb, which also zeroes x where w is 0).
HWY_INLINE __m256i SignedByteDot(__m256i w, __m256i x) { return ByteDot(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }

// The accumulation orders of the x86 quantised kernels (this file is built with
// -ffp-contract=off, so every product and sum below is rounded exactly where it is written). The
// row kernels hold 8 blocks in the lanes of one vector; the tiled prompt kernels
// (matmul_tiles-inl.h) hold 16 rows, one per lane, and follow the same order: the two agree bit
// for bit, so a token's result never depends on how many tokens share the call.
//  - Q8_0 (memory-bound when decoding; its tiles keep 8 tokens in registers with two chains):
//    block i's float(dot) * factor is fused into acc[i % 2] in block order; the result is
//    acc[0] + acc[1].
//  - Q4_0, Q4_1, Q4_K and Q6_K (compute-bound when decoding): per run of 8 blocks (Q4_0, Q4_1) or per
//    super-block's 8 sub-blocks (x blocks for Q6_K), p_i = float(dot_i) * factor_i, summed as the
//    tree ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) and added to a running sum; Q4_0 blocks
//    after the last run of 8 add their p one by one. Q4_1's minimum terms m_i * xs_i * (sum of x_i)
//    form a second sum in the same order, added to the first at the end.

// One fused multiply-add on scalars (one rounding, as each lane of a vector MulAdd).
HWY_INLINE float Fma1(float a, float b, float c) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::MulAdd(hn::Set(d1, a), hn::Set(d1, b), hn::Set(d1, c)));
}

// Q8_0's order for 8 consecutive blocks starting at an even index.
HWY_INLINE void AccumulateInOrder(hn::Vec<DS> dots, hn::Vec<DS> factors, float acc[2]) {
  const DS ds;
  HWY_ALIGN float v[8], f[8];
  hn::Store(dots, ds, v);
  hn::Store(factors, ds, f);
  for (int i = 0; i < 8; i += 2) {
    acc[0] = Fma1(v[i], f[i], acc[0]);
    acc[1] = Fma1(v[i + 1], f[i + 1], acc[1]);
  }
}

// The tree of Q4_K and Q6_K.
HWY_INLINE float TreeSum8(hn::Vec<DS> p) {
  const __m256 v = p.raw;
  const __m256 pairs = _mm256_add_ps(v, _mm256_permute_ps(v, 0xB1));          // lane 2i: p2i + p2i+1
  const __m256 quads = _mm256_add_ps(pairs, _mm256_permute_ps(pairs, 0x4E));  // lanes 0, 4: quads
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}
#endif  // SQUEEZEKV_X86_BYTE_DOT

// ------------------------------ the row drivers

// Tokens per tile: their quantised activations (16 x n_cols int16) stay in L2 while each weight
// row of the task is read once per tile.
constexpr int64_t kTokenTile = 16;

// y[t * n_rows + r] for rows [row_begin, row_end) and every token, by a quantised type's row
// kernel: Kernel::Dots<K>(row, tokens, n, out) dots one row with K = 1 or 4 tokens. Every kernel's
// per-token arithmetic is independent of K, so the 4-token prompt path and the 1-token path agree
// bit for bit.
template <class Kernel>
HWY_INLINE void QuantizedRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                              float* HWY_RESTRICT y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n = w.n_cols;
  for (int64_t t0 = 0; t0 < in.n_tok; t0 += kTokenTile) {
    const int64_t t1 = std::min(in.n_tok, t0 + kTokenTile);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = base + static_cast<size_t>(r) * stride;
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) {  // each weight block decoded once for 4 tokens
        TokenQ8 tokens[4];
        float dots[4];
        for (int k = 0; k < 4; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
        Kernel::template Dots<4>(row, tokens, n, dots);
        for (int k = 0; k < 4; ++k) y[(t + k) * w.n_rows + r] = dots[k];
      }
      for (; t < t1; ++t) {
        const TokenQ8 token = token_q8(*in.quantized, t, n);
        Kernel::template Dots<1>(row, &token, n, y + t * w.n_rows + r);
      }
    }
  }
}

// The same for a float type, whose Kernel::Dot(row, x, n) reads the unquantised activations.
template <class Kernel>
HWY_INLINE void FloatRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                          float* HWY_RESTRICT y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n = w.n_cols;
  for (int64_t t0 = 0; t0 < in.n_tok; t0 += kTokenTile) {
    const int64_t t1 = std::min(in.n_tok, t0 + kTokenTile);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = base + static_cast<size_t>(r) * stride;
      for (int64_t t = t0; t < t1; ++t) y[t * w.n_rows + r] = Kernel::Dot(row, in.x + t * n, n);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
